"""What the live gateway needs of its router, and which router it builds.

``ServingRouter`` is ``Router`` (what the attempt loop uses) plus what the rest of the app reads:
the config and clock it was built with, its ``RouterState`` (circuits, capacity, demand: the
background prober and a reload read it), ``rank`` (the explanation endpoint, the dashboard,
``gateway check``, the demo) and ``capacity_of`` (metrics). Both ``MeasuredRouter`` and
``LiveBeliefRouter`` satisfy it.

``build_router`` is the one place the app constructs its router. Which one is an internal switch
while the two are compared, not a setting for users: ``GATEWAY_ROUTER=belief`` in the process
environment selects the belief router (default ``measured``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Literal, Protocol, get_args, runtime_checkable

from gateway.config import ConfigError, GatewayConfig, ModelConfig, ProviderConfig
from gateway.events import GatewayEvents
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.capacity import ProviderLimit
from gateway.routing.health import RouterState
from gateway.routing.lengths import Forecast
from gateway.routing.overrides import ProviderPreferences
from gateway.routing.plan import Router, RouteRequest, SessionRoute, SnapshotSource
from gateway.routing.ranking import Ranking
from gateway.routing.router import MeasuredRouter
from gateway.samples import Endpoint, RequestKind
from gateway.types import Clock

RouterKind = Literal["measured", "belief"]
ROUTER_KINDS: tuple[RouterKind, ...] = get_args(RouterKind)
ROUTER_ENV = "GATEWAY_ROUTER"


@runtime_checkable
class ServingRouter(Router, Protocol):
    """A router the live gateway can serve with (see the module docstring)."""

    config: GatewayConfig
    state: RouterState
    clock: Clock

    def rank(
        self,
        model: ModelConfig,
        *,
        endpoint: Endpoint | None = ...,
        prompt_tokens: int = ...,
        max_tokens: int | None = ...,
        preferences: ProviderPreferences = ...,
        pinned: str | None = ...,
        session: SessionRoute | None = ...,
        kind: RequestKind | None = ...,
    ) -> Ranking:
        """``model``'s deployments in the order a request of this shape would try them, and why."""
        ...

    def forecast(self, request: RouteRequest) -> Forecast:
        """The request's answer length, predicted from its model's answers (``max_tokens`` caps it)."""
        ...

    def capacity_of(self, provider: ProviderConfig) -> ProviderLimit:
        """The provider's deployments' learned limits and reported budgets, taken together (for metrics)."""
        ...

    def provider_in_flight(self, provider: str) -> int:
        """Attempts at this provider running now (on this replica)."""
        ...


def router_kind(environ: Mapping[str, str]) -> RouterKind:
    """The router ``GATEWAY_ROUTER`` selects (``measured`` when unset); another value is an operator's error,
    refused at start-up."""
    raw = environ.get(ROUTER_ENV, "").strip().lower() or "measured"
    for kind in ROUTER_KINDS:
        if raw == kind:
            return kind
    raise ConfigError(f"{ROUTER_ENV}={raw!r}: expected one of {', '.join(ROUTER_KINDS)}")


def build_router(
    kind: RouterKind,
    config: GatewayConfig,
    stats: SnapshotSource,
    *,
    previous: ServingRouter | None = None,
    rng: random.Random | None = None,
    clock: Clock = time.monotonic,
    events: GatewayEvents | None = None,
) -> ServingRouter:
    """The router for ``config``; on a reload, ``previous`` lends its state (and a belief router its beliefs, a measured
    router its memory)."""
    state = previous.state if previous is not None else None
    if kind == "measured":
        memory = previous.memory if isinstance(previous, MeasuredRouter) else None
        return MeasuredRouter(config, stats, state=state, memory=memory, rng=rng, clock=clock, events=events)
    router = LiveBeliefRouter(config, stats, state=state, rng=rng, clock=clock, events=events)
    if isinstance(previous, BeliefRouter):
        router.inherit(previous)
    return router
