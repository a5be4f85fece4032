"""The seam between routing and the attempt loop: ``Router.plan`` → ``RoutePlan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config import DeploymentConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.frozen import positional_maker, quick_init
from gateway.policies import Affinity
from gateway.routing.capacity import RateLimits
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.samples import Endpoint, RequestKind, Sample
from gateway.stats import StatsSnapshot
from gateway.types import AffinityChoice, InputKind, MoveReason, RouteReason, StreamProgress


@quick_init
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
    first_token_timeout_s: float | None = None
    """This attempt's first-token deadline, learned from the deployment's own TTFT (None: the policy's)."""
    idle_timeout_s: float | None = None
    """This attempt's longest silence mid-stream, learned from the deployment's own gaps (None: the policy's)."""
    prefill_tokens_per_s: float | None = None
    """Its measured prefill speed: what the prompt tokens its cache served saved in first-token time."""
    shadowed: bool = False
    """A look runs beside it unseen (``RoutePlan.shadow``): it answers, and is measured to the end as the look is."""

    @property
    def name(self) -> str:
        return self.deployment.name

    @property
    def drains(self) -> bool:
        """Read on unseen if another attempt answers first (``gateway.relay.drain``): a probe, or the leader a
        shadow is compared with, is measured for what it is being judged on; every other loser is cancelled."""
        return self.reason == "explore" or self.shadowed


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
    kind: RequestKind | None = None
    """What it asks of its answer (tools, JSON, plain): deployments are judged by their valid rate for it."""
    client: str = ""
    """The client key's id ("": none): its answers' lengths are learned apart (``gateway.routing.lengths``)."""
    explain: bool = False
    """The caller asked for the routing trace: the plan carries its ``ranking`` even where that costs extra."""
    inputs: frozenset[InputKind] = frozenset()
    """The kinds of input it carries that some deployment refused (``gateway.routing.inputs``): none skips those."""


route_request_from_fields = positional_maker(RouteRequest)
"""``RouteRequest(*values)``, every field given in order (``gateway.frozen``): how intake builds one per request."""


@quick_init
@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Candidates in the order to try them; the policy bounds attempts, timeouts and hedging."""

    candidates: tuple[Candidate, ...]
    policy: PolicyConfig
    ranking: object = None
    """The router's ``Ranking`` behind this plan, for the routing trace (typed loosely: this module sits below
    the router)."""
    race: tuple[str, ...] = ()
    """The deployments this plan explores by racing, its first candidates in order: each starts when the one
    before it has had its ``hedge_after_s`` without a first token (0: at once), the leader after the last of
    them; the first token wins. Empty: no race."""
    affinity: AffinityDecision | None = None
    """What the router did with the request's session (None: it has none)."""
    shadow: Candidate | None = None
    """A deployment measured beside the first attempt but never the answer (``gateway.relay.drain``), if any."""

    @property
    def race_width(self) -> int:
        """Attempts its first-token race may hold at once: the primary and a hedge, or the probes and the leader."""
        return len(self.race) + 1 if self.race else 2


candidate_from_fields = positional_maker(Candidate)
"""``Candidate(*values)``, every field given in order (``gateway.frozen``): one per deployment per plan."""
route_plan_from_fields = positional_maker(RoutePlan)
"""``RoutePlan(*values)``, every field given in order: one per plan."""


class Router(Protocol):
    """Orders candidates for a request, admits each attempt, and hears how each went.

    ``plan`` must not do I/O: it runs while the request waits. ``attempt_started`` returns
    False when the candidate may not be tried now (its circuit is open, a half-open probe is
    already out, or its provider is full: ``at_capacity``); the attempt loop then skips it, and
    waits for a slot when every candidate was full. Every admitted attempt is closed by exactly
    one ``attempt_finished``, with the rate limits its response reported.
    """

    def plan(self, request: RouteRequest) -> RoutePlan: ...

    def attempt_started(self, candidate: Candidate, *, retry: bool = False) -> bool:
        """``retry``: the request waited to ask ``candidate`` again; admitted through an open circuit (the wait
        was decided with the provider's ``Retry-After`` or a back-off), not past capacity."""

    def at_capacity(self, candidate: Candidate) -> bool:
        """The candidate's provider has no room now (at its concurrency limit, or out of budget)."""

    def capacity_reopens_in_s(self) -> float | None:
        """Seconds until a provider that said it is out opens again (None: none is out), for waiters to look then."""

    def cooldown_s(self, candidate: Candidate) -> float:
        """Seconds until ``candidate`` is tried again after a failure (0: it may be tried now)."""

    def attempt_streaming(self, candidate: Candidate, progress: StreamProgress) -> None:
        """``candidate``'s first token came: ``progress`` counts its stream's bytes until ``attempt_finished``."""

    def attempt_finished(
        self,
        candidate: Candidate,
        sample: Sample,
        retry_after_s: float | None = None,
        limits: RateLimits | None = None,
        *,
        reason: str | None = None,
    ) -> None:
        """Close an admitted attempt with its ``Sample``; ``reason``: a failure's message (the client's error, free
        of secrets), kept as why its deployment's circuit opened if this failure opens it."""

    def continuation_refused(self, candidate: Candidate) -> None:
        """``candidate`` refused a continuation (a prefill) with a 4xx: not asked for one for a while."""

    def may_continue(self, candidate: Candidate) -> bool:
        """Whether ``candidate`` may be asked to continue an answer (it has not refused one lately)."""

    def context_exceeded(self, candidate: Candidate, limit: int | None) -> None:
        """``candidate`` refused the prompt as too long; ``limit``: the window its answer stated, if it did."""

    def context_window(self, candidate: Candidate) -> int | None:
        """The tokens ``candidate`` accepts, configured or learned (None: not known)."""

    def input_refused(self, candidate: Candidate, kind: InputKind, words: str) -> None:
        """``candidate`` refused a kind of input it does not accept (``words``: the client's error saying so): later
        requests carrying that kind are not planned there."""

    def try_hedge(self, plan: RoutePlan) -> bool:
        """Spend one hedge from the model's budget; False when the budget is used up."""

    def in_flight(self, model: str, deployment: str) -> int:
        """Attempts at this deployment running now (on this replica)."""


class SnapshotSource(Protocol):
    """What the router needs of the stats store: its latest local snapshot, without I/O."""

    def snapshot(self) -> StatsSnapshot: ...
