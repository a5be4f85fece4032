"""The runtime built from one config, and the one typed way a request finds it.

``app.create_app`` (the composition root) builds a ``GatewayRuntime`` from each config and keeps
the current one in a ``RuntimeHolder`` on the app. Endpoints never import the app: they call
``runtime_of(scope)`` (or ``holder_of``) from here. A request reads the runtime once and keeps
it to the end, so a reload (``gateway.reload``) that swaps in a new one never disturbs a request
in flight; the old runtime closes its upstream pools once its ``requests`` have all left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from gateway.accesslog import AccessLog
from gateway.admission.access import AccessControl
from gateway.config import GatewayConfig
from gateway.conversations import ConversationStore, InMemoryConversationStore
from gateway.leaderboard import InFlightCounts
from gateway.metrics.family import deployment_providers
from gateway.metrics.series import Metrics
from gateway.relay import Dispatcher
from gateway.responses_config import ResponsesConfig
from gateway.routing.serving import ServingRouter
from gateway.routing.trace import TraceStore
from gateway.sessions.bindings import BindingStore
from gateway.sessions.response_owners import ResponseOwners
from gateway.sessions.session_bindings import SessionBindings
from gateway.stats import StatsStore
from gateway.tokens import TokenCounter
from gateway.upstream_pool import UpstreamPool


class ActiveRequests:
    """How many requests are being served on one runtime; ``drained`` waits for the last to leave.

    The one mutable part of a runtime. Touched on the event loop only.
    """

    def __init__(self) -> None:
        self.count = 0
        self._idle: asyncio.Event | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0 and self._idle is not None:
            self._idle.set()

    async def drained(self) -> None:
        """Return once no request is being served."""
        while self.count > 0:
            self._idle = asyncio.Event()
            await self._idle.wait()


DEFAULT_CONVERSATION_BYTES = ResponsesConfig().max_memory_bytes


@dataclass(frozen=True)
class GatewayRuntime:
    """Everything built from one config; replaced whole on reload. Its parts hold their own state
    (the router its circuits, the stats store its window); the runtime only ties them together."""

    config: GatewayConfig
    router: ServingRouter
    dispatcher: Dispatcher
    upstreams: UpstreamPool
    counter: TokenCounter
    stats: StatsStore
    """Lives as long as the process: a reloaded config keeps the same store (``[stats]`` needs a restart)."""
    access: AccessControl
    """Client keys and limits of this config, over counters that live as long as the process."""
    access_log: AccessLog
    in_flight: InFlightCounts
    """Requests in flight per (model, deployment), for the leaderboard; the router provides it."""
    requests: ActiveRequests = field(default_factory=ActiveRequests)
    traces: TraceStore = field(default_factory=TraceStore)
    """Routing traces asked for lately (``x-gateway-trace: 1``); a reload hands them on."""
    owners: ResponseOwners = field(default_factory=ResponseOwners)
    """Which deployment created each response (Responses API), over the process-lived binding store."""
    sessions: SessionBindings = field(default_factory=SessionBindings)
    metrics_key: str | None = None
    """What ``GET /metrics`` needs (``[server] metrics_key_env``); None: it is open."""
    """Which deployment holds each session's prompt in cache, over the same store."""
    conversations: ConversationStore = field(
        default_factory=lambda: InMemoryConversationStore(DEFAULT_CONVERSATION_BYTES)
    )
    """The Responses conversations the gateway keeps (``gateway.conversations``); lives as long as the process."""

    @property
    def bindings(self) -> BindingStore:
        return self.owners.store

    def degraded_reasons(self) -> list[str]:
        health = self.stats.health()
        reasons = [health.reason or "stats backend degraded"] if health.degraded else []
        bindings = self.bindings.health()
        if bindings.degraded:
            # Responses continuations cannot be placed, and sessions are routed as if unbound.
            reasons.append((bindings.reason or "binding store degraded") + " (sessions routed unbound)")
        conversations = self.conversations.degraded_reason()
        if conversations is not None:
            reasons.append(conversations)  # follow-ups of other replicas' conversations are refused
        return reasons + self.access.degraded_reasons()

    def observe_gauges(self, metrics: Metrics) -> None:
        """Set the gauges read at scrape time from this runtime's state (called by ``GET /metrics``)."""
        for provider in self.config.providers:
            metrics.set_provider_capacity(provider.name, provider.max_concurrency)
            metrics.set_provider_limit(provider.name, self.router.capacity_of(provider), self.router.clock())
        health = self.stats.health()
        metrics.set_stats_backend(self.config.stats.backend, not health.degraded)
        metrics.observe_dropped_total(health.dropped_samples)
        metrics.set_bindings_backend(self.bindings.backend, not self.bindings.health().degraded)
        metrics.observe_snapshot(self.stats.snapshot(), deployment_providers(self.config))

    async def aclose(self) -> None:
        await self.dispatcher.aclose()
        await self.upstreams.aclose()
        self.access_log.flush()  # the lines a batch still holds


class RuntimeHolder:
    """Holds the runtime currently serving; ``current`` is swapped atomically on reload.

    Empty until the app's lifespan has built the first runtime: reading it before then is a bug,
    and says so.
    """

    def __init__(self) -> None:
        self._current: GatewayRuntime | None = None

    @property
    def current(self) -> GatewayRuntime:
        if self._current is None:
            raise RuntimeError("the gateway's runtime is not built yet (its lifespan has not started)")
        return self._current

    @current.setter
    def current(self, runtime: GatewayRuntime) -> None:
        self._current = runtime


def holder_of(scope: Mapping[str, Any]) -> RuntimeHolder:
    """The app's ``RuntimeHolder``, from a request's ASGI scope.

    Read by key (``State.__getitem__``): ``state.runtime`` reaches Starlette's ``State.__getattr__`` only after the
    ordinary attribute look-up has failed, raised and caught its ``AttributeError``, on every request. Both read the
    same dict; an app without one still gets the attribute look-up's ``AttributeError``."""
    state = scope["app"].state
    try:
        holder = state["runtime"]
    except KeyError:
        holder = state.runtime  # raises the AttributeError it always did
    if not isinstance(holder, RuntimeHolder):
        raise TypeError("this app has no gateway runtime (it was not built by gateway.app.create_app)")
    return holder


def runtime_of(scope: Mapping[str, Any]) -> GatewayRuntime:
    """The runtime serving now, from a request's ASGI scope. Read it once per request."""
    return holder_of(scope).current


def require_admin(request: Request) -> None:
    """Guard for admin endpoints (reload, routes, anything revealing configuration).

    Call first thing in a Starlette endpoint; it raises a ``GatewayError`` (401/403) that the
    app renders OpenAI-shaped::

        async def reload(request: Request) -> Response:
            require_admin(request)
            ...
    """
    runtime_of(request.scope).access.require_admin(request.scope)
