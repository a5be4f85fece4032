"""A model's ranking for one request shape: its deployments in order, with everything that put them there.

Data only: ``gateway.routing.belief_rank`` builds it from the router's beliefs, and the explanation endpoint,
the trace and the dashboard read it without importing the router. Nothing here decides a route.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.config import DeploymentConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.errors import GatewayError, NoCapacity, RateLimited
from gateway.frozen import quick_init
from gateway.routing.lengths import LengthSource
from gateway.samples import Endpoint, RequestKind
from gateway.types import CircuitState

Source = Literal["recent", "model", "none"]
"""Where a prediction's numbers come from: this replica's answers, or the model's other deployments (the prior)."""


@quick_init
@dataclass(frozen=True, slots=True)
class RequestShape:
    """What the score needs of a request."""

    endpoint: Endpoint
    prompt_tokens: int
    output_tokens: int
    output_source: LengthSource
    kind: RequestKind | None = None
    """What it asks of its answer (tools, JSON, plain); None: any."""


@quick_init
@dataclass(frozen=True, slots=True)
class Uncertainty:
    """Relative standard errors (log units; 0.1 ≈ ±10%) of a prediction's time, first token and tokens/s (4: nothing
    known)."""

    time: float = 4.0
    ttft: float = 4.0
    tokens_per_s: float = 4.0


@quick_init
@dataclass(frozen=True, slots=True)
class Prediction:
    """One deployment's predicted performance for one request; None where nothing is known."""

    ttft_s: float | None
    tokens_per_s: float | None
    time_s: float | None
    cost_usd: float
    success_rate: float
    """One minus its believed failure chance."""
    attempts: int
    """Attempts in the stats window that say something of the provider."""
    prior: bool
    """Nothing of its own heard yet: the prediction is its model's other deployments' (the pooled prior)."""
    uncertainty: Uncertainty = Uncertainty()
    """The spread of its level now, grown with its age."""
    samples: float = 0.0
    """Answers (and lower bounds) behind it."""
    age_s: float | None = None
    """Since it was last heard from (None: never)."""
    source: Source = "none"
    seconds_per_token: float | None = None
    """1 / ``tokens_per_s``."""
    answers: int = 0
    """Complete answers this replica heard from it."""
    failure_s: float | None = None
    """How long its recent failures took before they failed (None: no failure seen here)."""
    expected_s: float | None = None
    """``time_s`` with its failures' cost."""


@quick_init
@dataclass(frozen=True, slots=True)
class ScoreParts:
    """The weighted terms of a score; each is 0 for the best candidate on that dimension."""

    time: float = 0.0
    ttft: float = 0.0
    throughput: float = 0.0
    price: float = 0.0
    failure: float = 0.0

    @property
    def total(self) -> float:
        return self.time + self.ttft + self.throughput + self.price + self.failure


@quick_init
@dataclass(frozen=True, slots=True)
class Scored:
    """A deployment with its prediction, score (lower is better) and broken soft constraints."""

    deployment: DeploymentConfig
    prediction: Prediction
    parts: ScoreParts
    violations: tuple[str, ...]

    @property
    def score(self) -> float:
        return self.parts.total


@dataclass(frozen=True, slots=True)
class BeliefView:
    """What the router believes of one deployment now, for people. Medians are of single answers; a spread is
    their log standard deviation, the uncertainty of the level included."""

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
    """The share of draws in which it is the best for a request of the ranking's shape."""


@quick_init
@dataclass(frozen=True, slots=True)
class Ranked:
    """A deployment in a model's ranking, with its score, health, load and budget."""

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
    opened_after: str = ""
    """The failure that opened its circuit, in words (``Circuit.reason``); empty when it is closed or none was said."""
    limit: int | None = None
    """Requests it may have in flight now; None: no limit known."""
    blocked_in_s: float = 0.0
    """How long it (or its provider) said it is out of budget for; 0: it is not."""
    remaining_requests: int | None = None
    """What its provider's rate-limit headers last said it has left (None: never reported)."""
    remaining_tokens: int | None = None
    reset_in_s: float | None = None
    """When that budget resets, as last reported."""
    belief: BeliefView | None = None

    @property
    def deployment(self) -> DeploymentConfig:
        return self.scored.deployment

    @property
    def known(self) -> bool:
        """Its prediction rests on its own measurements (perhaps a few), not on the model's average."""
        return self.judged or not self.scored.prediction.prior

    @property
    def full(self) -> bool:
        """No room now: at its own limit, its provider at its ceiling, or out of budget until a reset (it stays in
        the plan: the attempt loop overflows past it, or waits for a slot)."""
        if self.blocked_in_s > 0 or (self.limit is not None and self.in_flight >= self.limit):
            return True
        ceiling = self.provider.max_concurrency
        return ceiling is not None and self.provider_in_flight >= ceiling

    @property
    def available(self) -> bool:
        return self.circuit != "open"

    @property
    def status(self) -> str:
        if self.blocked_in_s > 0:  # the longer, more telling reason, even if its circuit is open
            return "rate limited"
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
    requests: int = 0
    """Requests this replica routed for the model by score (no overrides) since it started."""
    probes: int = 0
    """Of those, the ones that explored (races and shadows included)."""
    races: int = 0
    cold_starts: int = 0
    """Requests routed while nothing was measured: every deployment raced (not probes)."""
    shadows: int = 0
    """Of the probes, the ones measured beside the leader, unseen."""
    extra_attempts: float = 0.0
    """Attempts per request beyond one: exploration's cost."""


def no_capacity(model: str, rows: Sequence[Ranked]) -> GatewayError:
    """The error of a request no deployment of ``rows`` can take now: 429 when every one is rate limited, else
    503; Retry-After when every one said how long to wait. An open circuit's reason is said (a lone broken
    deployment's 404 or 401 would otherwise be lost behind "circuit open" until the operator reads the logs)."""
    parts = []
    for row in rows:
        if row.circuit == "open":
            why = "rate limited" if row.rate_limited else "circuit open"
            after = f", after: {row.opened_after}" if row.opened_after and not row.rate_limited else ""
            parts.append(f"{row.deployment.name}: {why}, retry in {row.retry_in_s:.1f}s{after}")
        else:
            parts.append(f"{row.deployment.name}: provider at its concurrency limit ({row.limit})")
    waits = [r.retry_in_s for r in rows if r.circuit == "open"]
    headers = {"retry-after": str(max(1, math.ceil(min(waits))))} if len(waits) == len(rows) and waits else {}
    message = f"no deployment of model '{model}' can take a request now ({'; '.join(parts)})"
    if rows and all(r.rate_limited for r in rows):
        return RateLimited(message, code="upstream_rate_limited", headers=headers)
    return NoCapacity(message, headers=headers)
