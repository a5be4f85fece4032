"""Health and load: a circuit per deployment, requests in flight, and hedge budgets.

This is the router's only mutable state, kept in one ``RouterState`` that outlives config
reloads: requests started under the old config still hold their in-flight slots, and a
provider that is cooling down stays cooling down when a policy is edited.

Circuits (per model and deployment)::

    closed ──(failure_threshold consecutive failures while most recent attempts fail,
              or a 429)──► open
    open ──(cool-down over)──► half-open ──(one probe succeeds)──► closed
                                         └──(the probe fails)──► open, cool-down doubled

"Most": more than half of the last ``RECENT`` attempts. Under concurrency, fast failures (an
instant 503) complete before the slower successes started beside them, so a provider failing
30% of requests shows streaks of failures by completion order; the ratio keeps such a provider
open (its failures cost a quick fallback, and its score already pays for them) while one that is
down opens after ``failure_threshold`` failures. A router with its own reading of the failure chance
(``BeliefRouter``) gives it in place of the ratio, which lags once requests stop going there.

The cool-down doubles each time a circuit re-opens soon after closing without having answered in
between (a repeat: the probe's success was not a recovery), up to ``max_cooldown_s`` (15 s by
default: a provider that recovers is probed, in the background when no request comes, at most that
long after). A circuit that answered ``failure_threshold`` requests since it closed had recovered:
its next opening is a new outage, with the first cool-down, however soon it comes (a provider
rate-limited in bursts a few seconds apart is not shut out longer at each burst). A 429's
``Retry-After`` sets it directly (up to ``MAX_RETRY_AFTER_S``). A 429 opens the circuit at once,
with or without ``Retry-After``: the provider asked for fewer requests, and each request that
tried it first would only add to its load (without the header, the usual cool-down applies).
Attempts whose outcome is the request's fault (``client_error``) or the client's doing
(``client_cancelled``) count neither way. Not thread-safe: one event loop owns it.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import ProviderConfig
from gateway.policies import PolicyConfig
from gateway.routing.capacity import CapacityBoard
from gateway.routing.deadlines import LearnedDeadlines
from gateway.routing.hedge import TailThresholds
from gateway.routing.lengths import Lengths
from gateway.routing.windows import ContextWindows
from gateway.samples import Outcome
from gateway.types import CircuitState, DeploymentKey

logger = logging.getLogger("gateway")
IDLE_PROBES = 3
"""Failed background probes in a row of a deployment whose model nobody asked for since, before they stop."""

FAILURES: frozenset[Outcome] = frozenset({"upstream_error", "timeout", "broken_stream"})
RECENT = 20
"""How many recent attempts the failure ratio is taken over."""
MAX_RETRY_AFTER_S = 300.0
"""The longest ``Retry-After`` honoured as a cool-down (a provider asking for more is asked again then)."""


@dataclass(slots=True)
class Circuit:
    state: CircuitState = "closed"
    failures: int = 0
    """Consecutive failures."""
    open_until: float = 0.0
    level: int = 0
    """Re-opens in a row: the cool-down is ``cooldown_s * 2**level``."""
    closed_at: float = float("-inf")
    answered_since_close: int = 0
    """Successes since the circuit last closed: as many as the failures that open it mean it recovered."""
    probing: bool = False
    """A half-open probe is in flight: nothing else may be sent until it ends."""
    recent: deque[bool] = field(default_factory=lambda: deque(maxlen=RECENT))
    """Whether each of the last attempts failed."""
    rate_limited: bool = False
    """Opened by a 429's Retry-After: the provider asked to wait, it is not broken."""

    def mostly_failing(self) -> bool:
        return sum(self.recent) * 2 > len(self.recent)


StateChange = Callable[[DeploymentKey, CircuitState], None]


@dataclass
class HealthBoard:
    """Every deployment's circuit. ``on_change`` hears each state change (for metrics and logs)."""

    circuits: dict[DeploymentKey, Circuit] = field(default_factory=dict)

    def state(self, key: DeploymentKey, now: float, on_change: StateChange) -> CircuitState:
        circuit = self.circuits.get(key)
        if circuit is None:
            return "closed"
        if circuit.state == "open" and now >= circuit.open_until:
            circuit.state = "half_open"
            circuit.probing = False
            on_change(key, "half_open")
        return circuit.state

    def rate_limited(self, key: DeploymentKey) -> bool:
        circuit = self.circuits.get(key)
        return circuit is not None and circuit.state == "open" and circuit.rate_limited

    def retry_in(self, key: DeploymentKey, now: float) -> float:
        circuit = self.circuits.get(key)
        return 0.0 if circuit is None or circuit.state != "open" else max(0.0, circuit.open_until - now)

    def admit(self, key: DeploymentKey, now: float, on_change: StateChange) -> bool:
        """Whether an attempt may start now; a half-open circuit admits one probe at a time."""
        state = self.state(key, now, on_change)
        if state == "closed":
            return True
        if state == "open":
            return False
        circuit = self.circuits[key]
        if circuit.probing:
            return False
        circuit.probing = True
        return True

    def answering(self, key: DeploymentKey, now: float, on_change: StateChange) -> None:
        """A half-open circuit's probe began to answer (its first token): the provider is back, so the circuit closes
        now rather than when the answer ends, which for a long stream is seconds in which nothing else is sent."""
        circuit = self.circuits.get(key)
        if circuit is not None and circuit.state == "half_open":
            circuit.failures = 0
            self._close(key, circuit, now, on_change)

    def record(
        self,
        key: DeploymentKey,
        outcome: Outcome,
        retry_after_s: float | None,
        policy: PolicyConfig,
        now: float,
        on_change: StateChange,
        *,
        rate_limited: bool = False,
        mostly_failing: bool | None = None,
    ) -> None:
        """Account for one finished attempt; ``rate_limited``: it was refused with a 429; ``mostly_failing``: the
        router's own reading of whether most attempts there fail now (by default, the circuit's recent ratio)."""
        circuit = self.circuits.get(key)
        if outcome not in FAILURES:
            if outcome != "ok":
                if circuit is not None:
                    circuit.probing = False  # a neutral outcome proves nothing: let another probe go
                return
            if circuit is None:
                circuit = self.circuits[key] = Circuit()
            circuit.failures = 0
            circuit.recent.append(False)
            circuit.answered_since_close += 1
            if circuit.state == "half_open":
                self._close(key, circuit, now, on_change)
            return
        if circuit is None:
            circuit = self.circuits[key] = Circuit()
        circuit.failures += 1
        circuit.recent.append(True)
        if circuit.state == "open":
            return  # an attempt that started before the circuit opened: already accounted for
        rate_limited = rate_limited or retry_after_s is not None
        if circuit.state == "half_open":
            self._open(key, circuit, policy, now, retry_after_s, on_change, escalate=True, rate_limited=rate_limited)
        elif rate_limited or (
            circuit.failures >= policy.failure_threshold
            and (circuit.mostly_failing() if mostly_failing is None else mostly_failing)
        ):
            # Re-opening soon after the last close, with few answers between, is a repeat: it had not recovered.
            repeat = (
                now - circuit.closed_at < policy.max_cooldown_s
                and circuit.answered_since_close < policy.failure_threshold
            )
            self._open(key, circuit, policy, now, retry_after_s, on_change, escalate=repeat, rate_limited=rate_limited)

    @staticmethod
    def _close(key: DeploymentKey, circuit: Circuit, now: float, on_change: StateChange) -> None:
        """A half-open circuit's probe answered: the deployment is back."""
        circuit.state = "closed"
        circuit.probing = False
        circuit.closed_at = now
        circuit.answered_since_close = 0
        on_change(key, "closed")

    @staticmethod
    def _open(
        key: DeploymentKey,
        circuit: Circuit,
        policy: PolicyConfig,
        now: float,
        retry_after_s: float | None,
        on_change: StateChange,
        *,
        escalate: bool,
        rate_limited: bool,
    ) -> None:
        circuit.level = circuit.level + 1 if escalate else 0
        circuit.rate_limited = rate_limited
        if retry_after_s is not None:
            cooldown = min(max(retry_after_s, 0.001), MAX_RETRY_AFTER_S)
        else:
            cooldown = min(policy.cooldown_s * 2**circuit.level, policy.max_cooldown_s)
        circuit.state = "open"
        circuit.probing = False
        circuit.open_until = now + cooldown
        on_change(key, "open")


@dataclass
class HedgeBudget:
    """A token bucket per model: each hedge-eligible request adds ``budget`` tokens, each hedge spends one.

    Over any stretch of traffic, hedges stay within ``budget`` × requests plus the bucket's
    ``burst`` (so a quiet start still allows the first hedge).
    """

    burst: float = 2.0
    tokens: dict[str, float] = field(default_factory=dict)

    def credit(self, model: str, budget: float) -> None:
        self.tokens[model] = min(self.burst, self.tokens.get(model, 1.0) + budget)

    def take(self, model: str) -> bool:
        tokens = self.tokens.get(model, 1.0)
        if tokens < 1.0:
            return False
        self.tokens[model] = tokens - 1.0
        return True


@dataclass
class IdleProbes:
    """Which open circuits are worth a background probe (``gateway.relay.probe``).

    Per deployment: its failed probes since its model was last asked for, and what the demand count was.

    ``asked``: a model's requests so far (the router's ``RouterState.asked``); a change is demand returning.
    """

    failed: dict[DeploymentKey, int] = field(default_factory=dict)
    asked_at: dict[DeploymentKey, int] = field(default_factory=dict)
    skipped: dict[DeploymentKey, int] = field(default_factory=dict)
    """Ticks a due probe was left out for want of demand (for the explanation and the tests)."""

    def wanted(self, key: DeploymentKey, asked: int) -> bool:
        """Whether ``key`` may be probed now: demand came since its last failed probes, or they are few."""
        if self.asked_at.get(key) != asked:
            self.asked_at[key] = asked
            self.failed.pop(key, None)
        if self.failed.get(key, 0) < IDLE_PROBES:
            return True
        self.skipped[key] = self.skipped.get(key, 0) + 1
        if self.skipped[key] == 1:
            logger.info(
                "circuit probes of %s (model %s) stopped after %d failures: nobody asked for the model since; "
                "they start again with its next request",
                key[1],
                key[0],
                IDLE_PROBES,
            )
        return False

    def probed(self, key: DeploymentKey, ok: bool) -> None:
        if ok:
            self.failed.pop(key, None)
        else:
            self.failed[key] = self.failed.get(key, 0) + 1
        self.skipped.pop(key, None)


@dataclass
class RouterState:
    """What the router remembers between requests; carried over from one config to the next."""

    health: HealthBoard = field(default_factory=HealthBoard)
    hedges: HedgeBudget = field(default_factory=HedgeBudget)
    provider_in_flight: dict[str, int] = field(default_factory=dict)
    deployment_in_flight: dict[DeploymentKey, int] = field(default_factory=dict)
    sent_in_flight: dict[int, int] = field(default_factory=dict)
    """Each running attempt's deployment's in-flight count (itself included) when it was sent, by attempt id: the
    concurrency a refusal of it was made at, whatever has finished since the refusal came back."""
    tails: TailThresholds = field(default_factory=TailThresholds)
    deadlines: LearnedDeadlines = field(default_factory=LearnedDeadlines)
    windows: ContextWindows = field(default_factory=ContextWindows)
    refused_continuation: dict[DeploymentKey, float] = field(default_factory=dict)
    """Deployments that refused a continuation (a prefill) with a 4xx, until when they are not asked again."""
    capacity: CapacityBoard = field(default_factory=CapacityBoard)
    """Each deployment's learned concurrency limit and reported rate-limit budget."""
    asked: Counter[str] = field(default_factory=Counter)
    """Requests planned per model so far: the demand that keeps background probes going."""
    idle_probes: IdleProbes = field(default_factory=IdleProbes)
    lengths: Lengths = field(default_factory=Lengths)
    """What the answers' lengths were, per request shape, key and session (kept across a reload, as the rest)."""

    window_s: float = 300.0
    """The shared stats window's length (``stats.window_s``)."""

    def started(self, provider: str, key: DeploymentKey, attempt: int | None = None) -> None:
        self.provider_in_flight[provider] = self.provider_in_flight.get(provider, 0) + 1
        in_flight = self.deployment_in_flight[key] = self.deployment_in_flight.get(key, 0) + 1
        if attempt is not None:
            self.sent_in_flight[attempt] = in_flight

    def finished(self, provider: str, key: DeploymentKey, attempt: int | None = None) -> None:
        self.provider_in_flight[provider] = max(0, self.provider_in_flight.get(provider, 0) - 1)
        self.deployment_in_flight[key] = max(0, self.deployment_in_flight.get(key, 0) - 1)
        if attempt is not None:
            self.sent_in_flight.pop(attempt, None)

    def has_room(self, provider: ProviderConfig, key: DeploymentKey, now: float) -> bool:
        """Room for one more attempt at ``key`` (its learned limit) and at its provider (its ceiling)."""
        in_flight = self.deployment_in_flight.get(key, 0)
        return self.capacity.has_room(provider, key, in_flight, self.provider_in_flight.get(provider.name, 0), now)
