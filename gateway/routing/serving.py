"""What the live gateway needs of its router (``ServingRouter``), and the one place it builds it (``build_router``)."""

from __future__ import annotations

import random
import time
from typing import Protocol, runtime_checkable

from gateway.config import GatewayConfig, ModelConfig, ProviderConfig
from gateway.events import GatewayEvents
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.capacity import ProviderLimit
from gateway.routing.health import RouterState
from gateway.routing.lengths import Forecast
from gateway.routing.overrides import ProviderPreferences
from gateway.routing.plan import Router, RouteRequest, SessionRoute, SnapshotSource
from gateway.routing.ranking import Ranking
from gateway.samples import Endpoint, RequestKind
from gateway.types import Clock


@runtime_checkable
class ServingRouter(Router, Protocol):
    """``Router`` (what the attempt loop uses) plus what the rest of the app reads: the state the prober and a
    reload share, ``rank`` for the explanations and ``capacity_of`` for metrics. ``LiveBeliefRouter`` is one."""

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
        kind: RequestKind | None = ...,
        session: SessionRoute | None = ...,
    ) -> Ranking:
        """``model``'s deployments in the order a request of this shape (a turn of ``session``, if given) would try
        them, and why."""
        ...

    def forecast(self, request: RouteRequest) -> Forecast:
        """The request's answer length, predicted from its model's answers (``max_tokens`` caps it)."""
        ...

    def capacity_of(self, provider: ProviderConfig) -> ProviderLimit:
        """The provider's deployments' learned limits and reported budgets, taken together (for metrics)."""
        ...


def build_router(
    config: GatewayConfig,
    stats: SnapshotSource,
    *,
    previous: ServingRouter | None = None,
    rng: random.Random | None = None,
    clock: Clock = time.monotonic,
    events: GatewayEvents | None = None,
) -> ServingRouter:
    """The router for ``config``; on a reload, ``previous`` lends its state and its beliefs."""
    state = previous.state if previous is not None else None
    if previous is not None:
        previous.state.forget_changed(previous.config, config)
    router = LiveBeliefRouter(config, stats, state=state, rng=rng, clock=clock, events=events)
    if isinstance(previous, BeliefRouter):
        router.inherit(previous)
    return router
