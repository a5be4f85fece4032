"""A model's ranking for one request shape: its deployments in order, with everything that put them there.

The router builds it (``gateway.routing.belief_rank``); the explanation endpoint, the routing trace
and the dashboard read it. It lives apart from the router so that those can import it without
importing the router back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.config import DeploymentConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.errors import GatewayError, NoCapacity, RateLimited
from gateway.frozen import quick_init
from gateway.routing.scored import RequestShape, Scored
from gateway.stats import StatsSnapshot
from gateway.types import CircuitState


@dataclass(frozen=True, slots=True)
class BeliefView:
    """What the router believes of one deployment now, for people (``GET /v1/gateway/routes``, the trace,
    the dashboard). Medians are of single answers; a spread is their log standard deviation (0.4: about 68% of
    answers within ×1.5 of the median), the uncertainty of the level itself included."""

    ttft_s: float
    """Median first token, seconds."""
    ttft_spread: float
    tokens_per_s: float
    """Median output speed."""
    tokens_per_s_spread: float
    age_s: float | None
    """Since it was last heard from (an answer, or a bound from a race lost); None: never."""
    answers: int
    """Answers (and lower bounds) it heard."""
    changed: float
    """The chance its level changed since it was last heard (the hazard)."""
    failure: float
    """Its believed failure chance."""
    best: float
    """The probability it is the best deployment for a typical request (of the ranking's shape), by its draws."""


@quick_init
@dataclass(frozen=True, slots=True)
class Ranked:
    """A deployment in a model's ranking, with everything that put it there."""

    model: str
    scored: Scored
    provider: ProviderConfig
    circuit: CircuitState
    in_flight: int
    provider_in_flight: int
    judged: bool
    """It has ``min_samples`` answers: its prediction rests on its own measurements."""
    retry_in_s: float = 0.0
    rate_limited: bool = False
    """Its circuit is open because the provider answered 429 with a Retry-After."""
    limit: int | None = None
    """Requests it may have in flight now (its learned limit under its provider's ceiling); None: no limit known."""
    blocked_in_s: float = 0.0
    """How long it (or its provider, for a shared budget) said it is out of budget for (0: it is not)."""
    remaining_requests: int | None = None
    """What its provider's rate-limit headers last said it has left (None: never reported)."""
    remaining_tokens: int | None = None
    reset_in_s: float | None = None
    """When that budget resets, as last reported."""
    belief: BeliefView | None = None
    """The belief behind the prediction (None only where a ranking is built by hand, as tests do)."""

    @property
    def deployment(self) -> DeploymentConfig:
        return self.scored.deployment

    @property
    def known(self) -> bool:
        """Its prediction rests on its own measurements (perhaps a few), not on the model's average."""
        return self.judged or not self.scored.prediction.prior

    @property
    def full(self) -> bool:
        """No room now: at its own limit, its provider at its ceiling, or out of budget until a reset. A full
        deployment stays in the plan: the attempt loop overflows past it, or waits for a slot."""
        if self.blocked_in_s > 0 or (self.limit is not None and self.in_flight >= self.limit):
            return True
        ceiling = self.provider.max_concurrency
        return ceiling is not None and self.provider_in_flight >= ceiling

    @property
    def available(self) -> bool:
        return self.circuit != "open"

    @property
    def status(self) -> str:
        if self.blocked_in_s > 0:
            return (
                "rate limited"  # out of budget until a reset: the longer, more telling reason (if its circuit is open)
            )
        if self.circuit == "open":
            return "circuit open"
        if self.full:
            return "at capacity"
        if self.scored.violations:
            return "constraint"
        return "ready" if self.judged else "exploring"


@quick_init
@dataclass(frozen=True, slots=True)
class Ranking:
    """A model's deployments in the order a request would try them (unavailable ones included, last)."""

    model: ModelConfig
    policy: PolicyConfig
    shape: RequestShape
    rows: tuple[Ranked, ...]
    snapshot: StatsSnapshot
    requests: int = 0
    """Requests this replica routed for the model by score (no overrides) since it started."""
    probes: int = 0
    """Of those, the ones spent measuring a deployment away from the leader (races and shadows included)."""
    races: int = 0
    cold_starts: int = 0
    """Of the requests, the ones routed while nothing was measured: every deployment raced (not probes)."""
    shadows: int = 0
    """Of the probes, the ones measured beside the leader, unseen."""
    extra_attempts: float = 0.0
    """Attempts per request beyond one: exploration's cost."""


def no_capacity(model: str, rows: Sequence[Ranked]) -> GatewayError:
    """The error of a request no deployment can take now, failing fast: 429 when every deployment asked to wait
    (Retry-After), else 503 (``rows``: the model's ranking, none available)."""
    parts = []
    for row in rows:
        if row.circuit == "open":
            why = "rate limited" if row.rate_limited else "circuit open"
            parts.append(f"{row.deployment.name}: {why}, retry in {row.retry_in_s:.1f}s")
        else:
            parts.append(f"{row.deployment.name}: provider at its concurrency limit ({row.limit})")
    waits = [r.retry_in_s for r in rows if r.circuit == "open"]
    headers = {"retry-after": str(max(1, math.ceil(min(waits))))} if len(waits) == len(rows) and waits else {}
    message = f"no deployment of model '{model}' can take a request now ({'; '.join(parts)})"
    if rows and all(r.rate_limited for r in rows):
        return RateLimited(message, code="upstream_rate_limited", headers=headers)
    return NoCapacity(message, headers=headers)
