"""The application factory: config in, a Starlette app out; the lifespan owns every client.

``create_app`` does only cheap, pure work (resolving secrets from the environment, so that a
missing key fails at start-up with a clear message). The lifespan does the I/O: it loads the
tokenizer, opens the upstream connection pools, and closes them on shutdown.

This module is the composition root: only the CLI, the demo and tests import it. The runtime
built from a config (``gateway.runtime.GatewayRuntime``) sits in a ``RuntimeHolder`` that the
endpoints reach through ``gateway.runtime.runtime_of``; a reload (``gateway.reload``) swaps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ExceptionHandler, Lifespan, Receive, Scope, Send

from gateway import admin, api, sidecalls
from gateway.accesslog import AccessLog
from gateway.admission.access import AccessControl, AccessState
from gateway.admission.auth import AdminKey, KeyRing, load_keys
from gateway.admission.limits import HeaderSizeLimit
from gateway.admission.ratelimit import RateLimiter, open_rate_limiter
from gateway.admission.spending import SpendLedger
from gateway.admission.spending.factory import open_spend_store
from gateway.admission.usage import USAGE_TAP
from gateway.config import GatewayConfig, StatsConfig, resolve_metrics_key, resolve_secrets
from gateway.conversations import ConversationStore, InMemoryConversationStore, RedisConversationStore
from gateway.dashboard import dashboard, root
from gateway.descriptors import DescriptorWatch
from gateway.dialects import Dialect, dialect_for_path
from gateway.errors import GatewayError, MethodNotAllowed, NotFound
from gateway.events import EventFanout, GatewayEvents
from gateway.metrics.genai import GenAISink
from gateway.metrics.series import Metrics, check_single_process
from gateway.redis_client import Backoff, RedisConnections
from gateway.relay import AttemptRunner, Dispatcher
from gateway.relay.probe import CircuitProber
from gateway.reload import Reloader
from gateway.retry_hints import wants_retry_hints, with_retry_hints
from gateway.routing.serving import build_router
from gateway.routing.trace import TraceStore
from gateway.runtime import GatewayRuntime, RuntimeHolder
from gateway.samples import SampleFanout, SampleSink
from gateway.sessions.bindings import LOOKUP_TIMEOUT_S, BindingStore, InMemoryBindingStore, RedisBindingStore
from gateway.sessions.response_owners import ResponseOwners
from gateway.sessions.session_bindings import SessionBindings
from gateway.stats import StatsStore, open_stats_store
from gateway.tokens import load_token_counter
from gateway.types import Clock
from gateway.upstream_pool import UpstreamPool

logger = logging.getLogger("gateway")


@dataclass(frozen=True)
class AppOptions:
    """What a caller may inject beside the config: extra sample sinks, clocks, randomness, the environment,
    metrics.

    ``metrics`` outlives config reloads (counters never reset); by default each app has its own.
    ``config_path`` is the file ``POST /v1/gateway/reload`` (and SIGHUP, with ``reload_on_sighup``)
    re-reads; without it the config cannot be reloaded.
    """

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    sinks: Sequence[SampleSink] = ()
    clock: Clock | None = None
    metrics: Metrics = field(default_factory=Metrics)
    rate_limiter: RateLimiter | None = None
    """Used instead of the one ``[stats] backend`` implies; the app closes it on shutdown."""
    spend: SpendLedger | None = None
    """Budgets and spend, instead of the ledger ``[stats] backend`` implies (a test's own store or
    wall clock); the app closes its store on shutdown."""
    rng: random.Random | None = None
    """The router's randomness (exploration, tie-breaks); seed it for reproducible routing."""
    events: GatewayEvents | None = None
    """Hears every routing event (``gateway.events``: decisions, fallbacks, hedges, breaks, circuits),
    after the metrics."""
    config_path: str | None = None
    reload_on_sighup: bool = False
    client_keys: tuple[KeyRing, AdminKey] | None = None
    """The config's client keys and admin key, when the caller has loaded them already (``gateway
    serve`` does, to warn about exposure); otherwise ``create_app`` loads them, once."""
    binding_lookup_timeout_s: float = LOOKUP_TIMEOUT_S
    """How long a request may wait for Redis to find a binding this replica does not hold."""
    probe_interval_s: float | None = 1.0
    """How often open circuits past their cool-down are probed in the background (None: only by requests)."""


async def build_runtime(
    config: GatewayConfig,
    options: AppOptions,
    keys: Mapping[str, str | None],
    client_keys: tuple[KeyRing, AdminKey],
    stats: StatsStore,
    access_state: AccessState,
    previous: GatewayRuntime | None = None,
    owners: ResponseOwners | None = None,
    conversations: ConversationStore | None = None,
) -> GatewayRuntime:
    """The runtime for ``config``; on reload, ``previous`` lends its router state and tokenizer.

    ``keys`` are the providers' (``resolve_secrets``), ``client_keys`` the clients' (``load_keys``).
    """
    ring, admin = client_keys
    access = AccessControl(ring, admin, config.auth, config.limits, access_state)
    if previous is not None and previous.config.stats.tokenizer == config.stats.tokenizer:
        counter = previous.counter
    else:
        counter = await asyncio.to_thread(load_token_counter, config.stats.tokenizer)
    metrics_key = resolve_metrics_key(config, options.environ)
    upstreams = UpstreamPool.from_config(config, keys, previous.upstreams if previous is not None else None)
    events: GatewayEvents = options.metrics
    if options.events is not None:
        events = EventFanout([options.metrics, options.events])
    router = build_router(
        config,
        stats,
        previous=previous.router if previous is not None else None,
        rng=options.rng,
        clock=options.clock or time.monotonic,
        events=events,
    )
    # Where each attempt's Sample goes: see ``gateway.samples``.
    sinks: list[SampleSink] = [stats, USAGE_TAP, options.metrics]
    if config.metrics.otel_genai:
        sinks.append(GenAISink(options.metrics.genai(), config))
    sink = SampleFanout([*sinks, *options.sinks])
    if owners is None:
        owners = previous.owners if previous is not None else ResponseOwners()
    sessions = SessionBindings(owners.store)
    if conversations is None:
        conversations = (
            previous.conversations
            if previous is not None
            else InMemoryConversationStore(config.responses.max_memory_bytes)
        )
    # The line of requests waiting for a slot outlives a reload, as the slots it waits for do.
    queue = previous.dispatcher.runner.queue if previous is not None else None
    runner = AttemptRunner(
        upstreams,
        router,
        sink,
        counter,
        events=events,
        clock=options.clock or time.perf_counter,
        queue=queue,
        sessions=sessions,
    )
    runtime = GatewayRuntime(
        config=config,
        router=router,
        dispatcher=Dispatcher(runner, owners, providers_keep_responses=config.responses.state == "provider"),
        upstreams=upstreams,
        counter=counter,
        stats=stats,
        access_log=AccessLog(options.metrics, enabled=config.server.access_log, log_bodies=config.server.log_bodies),
        access=access,
        in_flight=router.in_flight,
        traces=previous.traces if previous is not None else TraceStore(),
        owners=owners,
        sessions=sessions,
        conversations=conversations,
        metrics_key=metrics_key,
    )
    # Last, once nothing can fail: a reload refused must leave the metrics as the old config made them.
    options.metrics.prepare(config)  # every series this config bounds, at zero: no empty panels
    return runtime


def _open_bindings(stats: StatsConfig, options: AppOptions, redis: RedisConnections) -> BindingStore:
    """The binding store the stats backend implies: in Redis on the request-path client, else in memory."""
    if stats.backend != "redis":
        return InMemoryBindingStore()
    return RedisBindingStore(redis.requests(), stats.key_prefix, lookup_timeout_s=options.binding_lookup_timeout_s)


def _open_conversations(config: GatewayConfig, redis: RedisConnections) -> ConversationStore:
    """Where the gateway keeps Responses conversations: Redis when the stats use it, else this process."""
    limit = config.responses.max_memory_bytes
    if config.stats.backend != "redis":
        return InMemoryConversationStore(limit)
    return RedisConversationStore(
        redis.requests(), config.stats.key_prefix, limit, backoff=Backoff.from_config(config.stats)
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: GatewayError
    if exc.status_code == 405:
        # Keep Starlette's Allow header: a 405 must say which methods the path takes.
        headers = dict(exc.headers or {})
        error = MethodNotAllowed(f"method {request.method} not allowed on {request.url.path}", headers=headers)
    else:
        error = NotFound(f"no such endpoint: {request.method} {request.url.path}")
    return api.error_response(error, dialect=_dialect_of(request))


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return api.error_response(exc, dialect=_dialect_of(request))


def _dialect_of(request: Request) -> Dialect:
    return dialect_for_path(request.url.path, "anthropic-version" in request.headers)


class GatewayApp(Starlette):
    """Starlette, with the inference endpoints reached directly.

    Those endpoints are pure ASGI, check header size and handle every error themselves, and
    relay a stream chunk by chunk: going through Starlette's middleware stack would wrap each
    chunk's ``send`` in three more calls. Everything else is routed by Starlette as usual.
    """

    def __init__(
        self,
        proxies: Mapping[str, api.ProxyEndpoint],
        routes: Sequence[BaseRoute],
        lifespan: Lifespan[Starlette],
        middleware: Sequence[Middleware],
        exception_handlers: Mapping[Any, ExceptionHandler],
    ) -> None:
        super().__init__(routes=routes, lifespan=lifespan, middleware=middleware, exception_handlers=exception_handlers)
        self.proxies = dict(proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and wants_retry_hints(scope["path"]):
            send = with_retry_hints(send)  # Anthropic's clients read x-should-retry on every error
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.proxies.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(config: GatewayConfig, options: AppOptions | None = None) -> Starlette:
    """Build the gateway app for ``config``. Raises ``ConfigError`` if a provider's key is missing
    or the client keys are invalid."""
    options = options or AppOptions()
    check_single_process(options.environ)
    keys = resolve_secrets(config, options.environ)
    if config.server.log_bodies:
        logger.warning("server.log_bodies is on: prompts and answers are written to the access log")
    # Loaded now, once: a bad keys file fails at start-up, not at the first request.
    client_keys = options.client_keys or load_keys(config, options.environ)
    # Redis credentials too; every part that shares state through Redis gets its client from here.
    redis = RedisConnections(config.stats, options.environ, config.source)
    holder = RuntimeHolder()

    async def build(new_config: GatewayConfig, previous: GatewayRuntime) -> GatewayRuntime:
        new_keys = resolve_secrets(new_config, options.environ)
        new_client_keys = load_keys(new_config, options.environ)
        state = previous.access.state
        return await build_runtime(new_config, options, new_keys, new_client_keys, previous.stats, state, previous)

    reloader = Reloader(holder, options.config_path, build)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stats = open_stats_store(config.stats, redis=redis)
        await stats.start()
        spend = options.spend or SpendLedger(open_spend_store(config.stats, redis))
        spend.listeners.append(options.metrics.spend)
        access_state = AccessState(options.rate_limiter or open_rate_limiter(config.stats, redis), spend)
        await access_state.limiter.start()
        bindings = _open_bindings(config.stats, options, redis)
        await bindings.start()
        owners = ResponseOwners(bindings)
        conversations = _open_conversations(config, redis)
        try:
            holder.current = await build_runtime(
                config, options, keys, client_keys, stats, access_state, owners=owners, conversations=conversations
            )
            prober = None
            if options.probe_interval_s is not None:
                prober = CircuitProber(lambda: holder.current.dispatcher.runner, options.probe_interval_s)
                prober.start()
            canary = None
            if config.canary is not None:
                # Imported here: the canary's HTTP client (aiohttp, ~9 MiB resident) is loaded only by a gateway that
                # runs one. It reads the current runtime at each round: a reload changes its settings (adding it
                # needs a restart).
                from gateway.canary import Canary

                canary = Canary(
                    lambda: holder.current.config,
                    lambda: holder.current.dispatcher.runner.sink,
                    lambda: holder.current.dispatcher.runner.counter,
                    options.environ,
                )
                canary.start()
            descriptors = DescriptorWatch()
            descriptors.start()
            loop = asyncio.get_running_loop()
            if options.reload_on_sighup:
                loop.add_signal_handler(signal.SIGHUP, reloader.reload_in_background)
            try:
                yield
            finally:
                if options.reload_on_sighup:
                    loop.remove_signal_handler(signal.SIGHUP)
                await reloader.aclose()
                if prober is not None:
                    await prober.aclose()
                if canary is not None:
                    await canary.aclose()
                await descriptors.aclose()
                await holder.current.aclose()
        finally:
            # Runs after in-flight requests have finished (or the shutdown grace ran out):
            # pending limit corrections and buffered stats are flushed last.
            await access_state.aclose()
            await stats.aclose()
            await bindings.aclose()
            await conversations.aclose()
            # Last: every part above has stopped using its Redis client.
            await redis.aclose()

    proxies = {
        "/v1/chat/completions": api.ProxyEndpoint("chat", "/chat/completions"),
        "/v1/completions": api.ProxyEndpoint("completions", "/completions"),
        "/v1/embeddings": api.ProxyEndpoint("embeddings", "/embeddings"),
        "/v1/responses": api.ProxyEndpoint("responses", "/responses"),
        "/v1/messages": api.ProxyEndpoint("messages", "/messages"),
    }
    routes = [
        # Also routed here, so that a GET to them gets Starlette's 405 with its Allow header.
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in proxies.items()),
        Route("/v1/responses/{response_id}", sidecalls.response_call, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}/input_items", sidecalls.response_call, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", sidecalls.response_call, methods=["POST"]),
        Route("/v1/messages/count_tokens", sidecalls.count_tokens, methods=["POST"]),
        Route("/v1/models", api.list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", api.retrieve_model, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/readyz", api.readyz, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/v1/gateway/stats", api.gateway_stats, methods=["GET"]),
        Route("/dashboard", dashboard, methods=["GET"]),
        Route("/", root, methods=["GET"]),
        Route("/v1/gateway/routes", admin.routes, methods=["GET"]),
        Route("/v1/gateway/reload", admin.reload_config, methods=["POST"]),
        Route("/v1/gateway/spend", admin.spend, methods=["GET"]),
    ]
    middleware = [Middleware(HeaderSizeLimit, max_bytes=lambda: holder.current.config.limits.max_header_bytes)]
    handlers = {HTTPException: _http_exception, GatewayError: _gateway_error}
    app = GatewayApp(proxies, routes=routes, lifespan=lifespan, middleware=middleware, exception_handlers=handlers)
    app.state.runtime = holder
    app.state.reloader = reloader
    app.state.metrics = options.metrics
    return app
