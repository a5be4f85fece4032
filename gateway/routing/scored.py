"""What a ranking says of one deployment for one request: its prediction and its score's parts.

The router makes these from its beliefs (``gateway.routing.belief_rank``) for the explanation endpoint, the
routing trace and the dashboard (``gateway.routing.ranking``). Data only: nothing here decides a route.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.config import DeploymentConfig
from gateway.frozen import quick_init
from gateway.routing.lengths import LengthSource
from gateway.samples import Endpoint, RequestKind

MAX_UNCERTAINTY = 4.0
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
    """Where its expected answer length came from (``gateway.routing.lengths``)."""
    kind: RequestKind | None = None
    """What it asks of its answer (tools, JSON, plain): the valid rate is read for that kind (None: every kind)."""


@quick_init
@dataclass(frozen=True, slots=True)
class Uncertainty:
    """Relative standard errors (log units; 0.1 ≈ ±10%) of a prediction's time, first token and tokens/s."""

    time: float = MAX_UNCERTAINTY
    ttft: float = MAX_UNCERTAINTY
    tokens_per_s: float = MAX_UNCERTAINTY


UNKNOWN = Uncertainty()


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
    uncertainty: Uncertainty = UNKNOWN
    """Now: the spread of its level (first token, speed, and both for the time), grown with its age."""
    samples: float = 0.0
    """Answers (and lower bounds) behind it."""
    age_s: float | None = None
    """Since it was last heard from (None: never)."""
    source: Source = "none"
    seconds_per_token: float | None = None
    """1 / ``tokens_per_s``: the stream's cost per output token, which is what time adds up."""
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
