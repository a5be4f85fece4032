"""A model's ranking for one request shape: its deployments in order, with everything that put them there.

The router builds it (``MeasuredRouter.rank``); exploration, ordering, the explanation endpoint,
the routing trace and the dashboard read it. It lives apart from the router so that those can
import it without importing the router back.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import DeploymentConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.routing.score import RequestShape, Scored
from gateway.stats import StatsSnapshot
from gateway.types import CircuitState


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
    """It has ``min_samples`` attempts in the window: its score rests on its own measurements."""
    retry_in_s: float = 0.0
    rate_limited: bool = False
    """Its circuit is open because the provider answered 429 with a Retry-After."""

    @property
    def deployment(self) -> DeploymentConfig:
        return self.scored.deployment

    @property
    def known(self) -> bool:
        """Its prediction rests on its own measurements (perhaps a few), not on the model's average."""
        return self.judged or not self.scored.prediction.prior

    @property
    def full(self) -> bool:
        return self.provider_in_flight >= self.provider.max_concurrency

    @property
    def available(self) -> bool:
        return self.circuit != "open" and not self.full

    @property
    def status(self) -> str:
        if self.circuit == "open":
            return "circuit open"
        if self.full:
            return "at max_concurrency"
        if self.scored.violations:
            return "constraint"
        return "ready" if self.judged else "exploring"


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
    """Of those, the ones spent measuring a deployment (cold starts and races included)."""
    races: int = 0
