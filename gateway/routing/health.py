"""Health and load: a circuit per deployment, requests in flight, hedge budgets and context windows.

``RouterState`` is the router's only mutable state. It outlives config reloads: attempts started under the old
config still hold their in-flight slots, and a circuit cooling down stays so when a policy is edited. The circuits'
rules and the windows' are docs/routing.md's ("Load and health", "Context windows"). Not thread-safe: one event loop
owns it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import DeploymentConfig, GatewayConfig, ProviderConfig
from gateway.errors import clip
from gateway.policies import PolicyConfig
from gateway.routing.capacity import CapacityBoard
from gateway.routing.deadlines import LearnedDeadlines
from gateway.routing.hedge import TailThresholds
from gateway.routing.inputs import RefusedInputs
from gateway.routing.trials import Trial, Trials
from gateway.samples import Outcome
from gateway.types import CircuitState, DeploymentKey

logger = logging.getLogger("gateway")
IDLE_PROBES = 3
"""Failed background probes in a row of a deployment whose model nobody asked for since, before they stop."""

FAILURES: frozenset[Outcome] = frozenset({"upstream_error", "timeout", "broken_stream"})
UNSERVABLE_STATUSES = frozenset({401, 403, 404})
"""Statuses no retry cures until the operator's config changes: the provider refused the gateway's key (401, 403)
or does not know the deployment's model (404). ``HealthBoard.record(unservable=...)``."""
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
    rate_limited: bool = False
    """Opened by a 429's Retry-After: the provider asked to wait, it is not broken."""
    reason: str = ""
    """The message of the failure that opened it, clipped to 200 characters (empty: none was given, e.g. a stream
    broken after its first token): said when a request finds no deployment to take it (``ranking.no_capacity``). Set
    only when the circuit opens; the messages are the clients' errors, already free of secrets."""


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

    def reason(self, key: DeploymentKey) -> str:
        """Why the circuit is open (``Circuit.reason``); empty when it is not, or was given none."""
        circuit = self.circuits.get(key)
        return "" if circuit is None or circuit.state != "open" else circuit.reason

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
        """A half-open circuit's probe sent its first token: it closes now rather than when a long stream ends."""
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
        mostly_failing: bool = True,
        unservable: bool = False,
        reason: str | None = None,
    ) -> None:
        """Account for one finished attempt. ``rate_limited``: it was refused with a 429; ``mostly_failing``: the
        router's reading of whether most attempts there fail now (consecutive failures open the circuit only then);
        ``unservable``: the provider refused the gateway's key or does not know the deployment's model
        (``UNSERVABLE_STATUSES``), which no retry cures until the operator's config changes: the circuit opens at once,
        and stays open longer each time its probe fails. ``reason``: the failure's message, kept if it opens the
        circuit."""
        circuit = self.circuits.get(key)
        if outcome != "ok" and outcome not in FAILURES:
            if circuit is not None:
                circuit.probing = False  # a neutral outcome proves nothing: let another probe go
            return
        if circuit is None:
            circuit = self.circuits[key] = Circuit()
        if outcome == "ok":
            circuit.failures = 0
            circuit.answered_since_close += 1
            if circuit.state == "half_open":
                self._close(key, circuit, now, on_change)
            return
        circuit.failures += 1
        if circuit.state == "open":
            return  # an attempt that started before the circuit opened: already accounted for
        rate_limited = rate_limited or retry_after_s is not None
        if circuit.state == "half_open":
            repeat = True  # its probe failed
        elif rate_limited or unservable or (circuit.failures >= policy.failure_threshold and mostly_failing):
            # Re-opening soon after the last close, with few answers between, is a repeat: it had not recovered.
            repeat = (
                now - circuit.closed_at < policy.max_cooldown_s
                and circuit.answered_since_close < policy.failure_threshold
            )
        else:
            return
        circuit.level = circuit.level + 1 if repeat else 0
        circuit.rate_limited = rate_limited
        circuit.reason = clip(reason, 200) if reason else ""
        if retry_after_s is not None:
            cooldown = min(max(retry_after_s, 0.001), MAX_RETRY_AFTER_S)
        else:
            cooldown = min(policy.cooldown_s * 2**circuit.level, policy.max_cooldown_s)
        circuit.state = "open"
        circuit.probing = False
        circuit.open_until = now + cooldown
        on_change(key, "open")

    @staticmethod
    def _close(key: DeploymentKey, circuit: Circuit, now: float, on_change: StateChange) -> None:
        circuit.state = "closed"
        circuit.probing = False
        circuit.closed_at = now
        circuit.answered_since_close = 0
        on_change(key, "closed")


BUDGET_START = 1.0
"""Looks a model's bucket holds before its first request: looks stay within ``BUDGET_START`` + the share ×
requests (a quiet start still allows the first race or hedge)."""


@dataclass
class LookBudget:
    """A token bucket per model, for extra attempts (a race's or shadow's look, a hedge): each eligible request adds
    its share, each extra attempt spends one, so they stay within the share × requests plus ``burst``."""

    burst: float = 2.0
    tokens: dict[str, float] = field(default_factory=dict)

    def credit(self, model: str, share: float) -> None:
        self.tokens[model] = min(self.burst, self.tokens.get(model, BUDGET_START) + share)

    def ready(self, model: str) -> bool:
        return self.tokens.get(model, BUDGET_START) >= 1.0

    def take(self, model: str) -> bool:
        tokens = self.tokens.get(model, BUDGET_START)
        if tokens < 1.0:
            return False
        self.tokens[model] = tokens - 1.0
        return True


@dataclass
class ContextWindows:
    """The windows learned from ``context_length_exceeded`` answers, by (model, deployment): the limit, and when it
    was heard (or last tried again), for how long it is believed (``gateway.routing.trials``)."""

    learned: dict[DeploymentKey, tuple[int, float]] = field(default_factory=dict)

    def learn(self, key: DeploymentKey, limit: int, now: float) -> None:
        """Remember the limit a provider stated (the smallest, where it stated several while believed)."""
        known = self.learned.get(key)
        self.learned[key] = (limit if known is None else min(limit, known[0]), now)

    def window(self, model: str, deployment: DeploymentConfig) -> int | None:
        known = self.learned.get((model, deployment.name))
        configured = deployment.context_window
        if known is None or configured is None:
            return configured if known is None else known[0]
        return min(known[0], configured)

    def fits(
        self,
        model: str,
        deployment: DeploymentConfig,
        prompt_tokens: int,
        now: float,
        believed_s: float,
        trials: dict[str, Trial],
    ) -> bool:
        """Whether the prompt fits: its estimate (the body's bytes / 4) counts the JSON's syntax as tokens and runs
        high, so a deployment is skipped only when it exceeds the window by a quarter. A learned window older than
        ``believed_s`` that the prompt exceeds (a configured one still holds) lets the deployment be tried again
        (``trials``), and is believed for ``believed_s`` more meanwhile."""
        window = self.window(model, deployment)
        if window is None or prompt_tokens <= window * 1.25:
            return True
        key = (model, deployment.name)
        known = self.learned.get(key)
        configured = deployment.context_window
        if known is None or now - known[1] < believed_s or (configured is not None and configured <= known[0]):
            return False
        if configured is not None and prompt_tokens > configured * 1.25:
            return False
        self.learned[key] = (known[0], now)
        trial = trials.get(deployment.name)
        trials[deployment.name] = Trial(kinds=trial.kinds, window=True) if trial is not None else Trial(window=True)
        return True


@dataclass
class IdleProbes:
    """Which open circuits are worth a background probe (``gateway.relay.probe``): those whose model was asked for
    since their last failed probes, or with fewer than ``IDLE_PROBES`` of them."""

    failed: dict[DeploymentKey, int] = field(default_factory=dict)
    asked_at: dict[DeploymentKey, int] = field(default_factory=dict)
    """The model's request count (``RouterState.asked``) when the failures were counted: a change is demand."""
    skipped: dict[DeploymentKey, int] = field(default_factory=dict)
    """Ticks a due probe was left out for want of demand."""

    def wanted(self, key: DeploymentKey, asked: int) -> bool:
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
    hedges: LookBudget = field(default_factory=LookBudget)
    provider_in_flight: dict[str, int] = field(default_factory=dict)
    deployment_in_flight: dict[DeploymentKey, int] = field(default_factory=dict)
    sent_in_flight: dict[int, int] = field(default_factory=dict)
    """Per running attempt (by id): its deployment's in-flight count, itself included, when it was sent (the
    concurrency a refusal of it was made at)."""
    tails: TailThresholds = field(default_factory=TailThresholds)
    deadlines: LearnedDeadlines = field(default_factory=LearnedDeadlines)
    windows: ContextWindows = field(default_factory=ContextWindows)
    inputs: RefusedInputs = field(default_factory=RefusedInputs)
    refused_continuation: dict[DeploymentKey, float] = field(default_factory=dict)
    """Deployments that refused a continuation (a prefill) with a 4xx, until when they are not asked again."""
    capacity: CapacityBoard = field(default_factory=CapacityBoard)
    asked: Counter[str] = field(default_factory=Counter)
    """Requests planned per model so far: the demand that keeps background probes going."""
    idle_probes: IdleProbes = field(default_factory=IdleProbes)
    trials: Trials = field(default_factory=Trials)
    """Requests trying a deployment again for what it refused (``gateway.routing.trials``)."""

    def started(self, provider: str, key: DeploymentKey, attempt: int) -> None:
        self.provider_in_flight[provider] = self.provider_in_flight.get(provider, 0) + 1
        in_flight = self.deployment_in_flight[key] = self.deployment_in_flight.get(key, 0) + 1
        self.sent_in_flight[attempt] = in_flight

    def finished(self, provider: str, key: DeploymentKey, attempt: int) -> None:
        self.provider_in_flight[provider] = max(0, self.provider_in_flight.get(provider, 0) - 1)
        self.deployment_in_flight[key] = max(0, self.deployment_in_flight.get(key, 0) - 1)
        self.sent_in_flight.pop(attempt, None)

    def forget_changed(self, before: GatewayConfig, after: GatewayConfig) -> None:
        """Forget the windows and refused inputs learned of deployments a reload changed: served elsewhere (another
        provider, base URL or upstream model), given another ``context_window``, or gone. What an edit of a price
        or a policy leaves in place is kept."""
        now = _serving(after)
        for key, served in _serving(before).items():
            if now.get(key) != served:
                self.windows.learned.pop(key, None)
                self.inputs.refused.pop(key, None)

    def trial_ended(self, candidate: object, outcome: Outcome) -> None:
        """An attempt ended: if it tried a deployment again (``gateway.routing.trials``), an answer unlearns what it
        tried; a refusal lets the limit it states be learned anew, not as the smaller of it and the old one."""
        ended = self.trials.ended(candidate)
        if ended is None:
            return
        key, trial = ended
        if outcome == "ok":
            self.inputs.forget(key, trial.kinds)
        if trial.window and outcome in ("ok", "client_error"):
            self.windows.learned.pop(key, None)

    def has_room(self, provider: ProviderConfig, key: DeploymentKey, now: float) -> bool:
        """Room for one more attempt at ``key`` (its learned limit) and at its provider (its ceiling)."""
        in_flight = self.deployment_in_flight.get(key, 0)
        return self.capacity.has_room(provider, key, in_flight, self.provider_in_flight.get(provider.name, 0), now)


def _serving(config: GatewayConfig) -> dict[DeploymentKey, tuple[object, ...]]:
    """What each deployment is, for what it accepts: where it is sent, the model asked for, the window declared."""
    providers = {p.name: p for p in config.providers}
    return {
        (m.name, d.name): (
            d.provider,
            providers[d.provider].base_urls,
            providers[d.provider].base_url,
            d.model,
            d.context_window,
        )
        for m in config.models
        for d in m.deployments
    }
