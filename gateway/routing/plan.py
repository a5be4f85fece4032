"""The seam between routing and the attempt loop: ``Router.plan`` → ``RoutePlan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config import DeploymentConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.policies import Affinity
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.samples import Endpoint, Sample
from gateway.types import AffinityChoice, MoveReason, RouteReason


@dataclass(frozen=True, slots=True)
class Candidate:
    """One deployment the request may be sent to, and why it is in the plan where it is."""

    deployment: DeploymentConfig
    provider: ProviderConfig
    reason: RouteReason = "best-score"
    model: str = ""
    """The client-facing model name (with ``deployment.name``, the key of the deployment's stats and health)."""
    hedge_after_s: float | None = None
    """Start a hedge when this candidate's first token is later than this (None: never)."""
    predicted_s: float | None = None
    """The router's predicted time for the request on this candidate (None: nothing known)."""
    prefill_tokens_per_s: float | None = None
    """Its measured prefill speed: what the prompt tokens its cache served saved in first-token time."""

    @property
    def name(self) -> str:
        return self.deployment.name


SessionLookup = Literal["bound", "unbound", "unavailable"]
"""What the binding store said of a session: bound to a deployment, bound nowhere, or could not tell in time."""


@dataclass(frozen=True, slots=True)
class SessionRoute:
    """A request's session as the router sees it: the binding, if one could be read, and the policy's mode."""

    key: str
    source: str
    affinity: Affinity
    lookup: SessionLookup = "unbound"
    deployment: str | None = None
    """The deployment its previous answer came from (``lookup == "bound"``)."""
    prompt_tokens: int = 0
    """That answer's prompt size: the part of this prompt expected in that deployment's cache."""


@dataclass(frozen=True, slots=True)
class AffinityDecision:
    """What the router did with the request's session, and why (``x-gateway-affinity``, metrics, the trace)."""

    choice: AffinityChoice
    bound: str | None = None
    reason: MoveReason | None = None

    @property
    def header(self) -> str:
        """``stay``, ``move; reason=slower; from=groq``, ``new``, ``unknown``, ``off``."""
        if self.choice == "move":
            return f"move; reason={self.reason}; from={self.bound}"
        return self.choice


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What the router may know of a request: no HTTP, no body beyond what scores need."""

    model: ModelConfig
    endpoint: Endpoint
    stream: bool
    prompt_tokens: int
    """An estimate of the prompt's size in tokens."""
    max_tokens: int | None
    """The request's own output ceiling, if it set one."""
    preferences: ProviderPreferences = NO_PREFERENCES
    """The request's ``provider`` object and model suffix, validated."""
    pinned: str | None = None
    """Only this deployment may serve (it holds the state the request refers to, e.g. a previous response)."""
    session: SessionRoute | None = None
    """The conversation this request continues, if it names one or is long enough to be fingerprinted."""


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Candidates in the order to try them; the policy bounds attempts, timeouts and hedging."""

    candidates: tuple[Candidate, ...]
    policy: PolicyConfig
    ranking: object = None
    """The router's ``Ranking`` behind this plan (typed loosely: this module sits below the router),
    for the request's routing trace (``gateway.routing.trace``)."""
    race_probe: str | None = None
    """The deployment this plan explores by racing (its first candidate, the leader its hedge), if any."""
    affinity: AffinityDecision | None = None
    """What the router did with the request's session (None: it has none)."""


class Router(Protocol):
    """Orders candidates for a request, admits each attempt, and hears how each went.

    ``plan`` must not do I/O: it runs while the request waits. ``attempt_started`` returns
    False when the candidate may not be tried now (its circuit is open, a half-open probe is
    already out, or its provider is at ``max_concurrency``); the attempt loop then skips it.
    Every admitted attempt is closed by exactly one ``attempt_finished``.
    """

    def plan(self, request: RouteRequest) -> RoutePlan: ...

    def attempt_started(self, candidate: Candidate) -> bool: ...

    def attempt_finished(self, candidate: Candidate, sample: Sample, retry_after_s: float | None = None) -> None: ...

    def try_hedge(self, plan: RoutePlan) -> bool:
        """Spend one hedge from the model's budget; False when the budget is used up."""
        ...

    def in_flight(self, model: str, deployment: str) -> int:
        """Attempts at this deployment running now (on this replica)."""
        ...
