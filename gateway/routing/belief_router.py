"""The belief-based router: one belief per deployment, one draw per request, and the control loops that are not
beliefs (circuits, capacity, context windows, learned deadlines, the tail hedge).

``plan`` reads each allowed deployment's belief, told of its attempts under way (``belief_running``), and lets one
draw order them (``choose``); ``belief_candidates`` makes the order into candidates. ``attempt_finished`` turns each
attempt into evidence (``belief_attempts.tell``); the other replicas' answers are heard at plan time
(``belief_others``).
"""

from __future__ import annotations

import random
import time

from gateway.config import DeploymentConfig, GatewayConfig, ModelConfig, PolicyConfig
from gateway.errors import InvalidRequest, NoCapacity
from gateway.events import GatewayEvents, NoEvents
from gateway.routing.affinity import cached_on, stay_first, staying
from gateway.routing.apis import speaking
from gateway.routing.belief import NO_PRIOR, Belief
from gateway.routing.belief_attempts import RunningAttempt, bytes_per_token, tell
from gateway.routing.belief_candidates import candidates_of, choose_for, kind_terms
from gateway.routing.belief_hazard import Hazard
from gateway.routing.belief_others import OthersAnswers
from gateway.routing.belief_running import RunningViews
from gateway.routing.capacity import RateLimits
from gateway.routing.choose import Budget, Choice, Counts, Option
from gateway.routing.cost import Shape, Weights
from gateway.routing.draws import new_tuple
from gateway.routing.filters import allowed, as_preferred
from gateway.routing.health import UNSERVABLE_STATUSES, RouterState
from gateway.routing.inputs import accepting
from gateway.routing.lengths import LengthKey, Lengths, request_shape
from gateway.routing.overrides import Sort
from gateway.routing.plan import Candidate, RoutePlan, RouteRequest, SnapshotSource, route_plan_from_fields
from gateway.routing.priors import Pool, Prior
from gateway.routing.trials import Trial, believed_s
from gateway.samples import Sample
from gateway.stats import StatsSnapshot
from gateway.stats.answers import Answer, answer_of, tells
from gateway.types import CircuitState, Clock, DeploymentKey, InputKind, StreamProgress


class BeliefRouter:
    """Implements ``Router`` with one belief per deployment and one draw per request."""

    def __init__(
        self,
        config: GatewayConfig,
        stats: SnapshotSource,
        *,
        state: RouterState | None = None,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        events: GatewayEvents | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.state = state if state is not None else RouterState()
        self.rng = rng if rng is not None else random.Random()
        self.clock = clock
        self.events: GatewayEvents = events if events is not None else NoEvents()
        self._providers = {p.name: p for p in config.providers}
        self._provider_of = {(m.name, d.name): d.provider for m in config.models for d in m.deployments}
        self._price_of = {(m.name, d.name): d.price_out for m in config.models for d in m.deployments}
        self._model_of = {m.name: m for m in reversed(config.models)}
        self.beliefs: dict[DeploymentKey, Belief] = {}
        self.hazards: dict[str, Hazard] = {}  # each model's change rate: its deployments change alike
        self.priors: dict[DeploymentKey, Prior] = {}
        """Each deployment's prior, pooled from its model's others (refreshed on every answer to the model)."""
        self.lengths = Lengths()
        self.budget = Budget()
        self.counts: dict[str, Counts] = {}
        self._attempts: dict[int, RunningAttempt] = {}
        self._open: dict[DeploymentKey, dict[int, RunningAttempt]] = {}
        """Attempts running now, per deployment (what an overdue first token is read from)."""
        self.running = RunningViews()
        """Each deployment's belief as its running attempts tell it, found again as they change."""
        self._lengths_of: dict[int, tuple[LengthKey, int | None]] = {}
        self._bytes_per_token: dict[str, float] = {}
        """Each API's stream bytes per output token (its events' envelope), from finished streams."""
        self._weights: dict[tuple[int, Sort | None], tuple[PolicyConfig, Weights]] = {}
        """``Weights.of`` each policy (by identity: policies are frozen) and sort, found once."""
        self._pools: dict[str, tuple[list[DeploymentKey], Pool]] = {}  # each model's, as ``_pool`` pooled it last
        self.others = OthersAnswers()
        """Which of the other replicas' answers the beliefs have heard."""

    def exploration(self, model: str) -> tuple[float, float]:
        """Share of ``model``'s requests that explored, and attempts per request beyond one (for reports)."""
        return self.counts.get(model, Counts()).shares()

    def belief(self, model: str, deployment: str) -> Belief:
        key = (model, deployment)
        belief = self.beliefs.get(key)
        if belief is None:
            belief = self.beliefs[key] = Belief(hazard=self.hazards.setdefault(model, Hazard()))  # one per model
        return belief

    # -- planning ---------------------------------------------------------------------------

    def plan(self, request: RouteRequest) -> RoutePlan:
        model, preferences = request.model, request.preferences
        name = model.name  # each read once: compiled, a Python attribute look-up per read
        stream, prompt_tokens, max_tokens = request.stream, request.prompt_tokens, request.max_tokens
        policy = self.config.policies[model.policy]  # ``config.policy_for``'s, without its interpreted frame
        now = self.clock()
        narrowed = speaking(model, request.endpoint, request.pinned)
        # What was learned of a deployment's limits is believed for the hazard's half-life (``routing.trials``).
        believed = believed_s(self.hazards.get(name))
        trials: dict[str, Trial] = {}
        allowing = allowed(narrowed, preferences, self._providers)
        # Before the circuits: a model whose only image-reading deployment is down is out of capacity, not of images.
        kept = accepting(self.state.inputs, name, allowing, request.inputs, now, believed, trials)
        deployments = [d for d in kept if self.state.health.state((name, d.name), now, self._circuit_changed) != "open"]
        if not deployments:
            raise NoCapacity(f"no deployment of model '{name}' can take a request now (circuits open)")
        windows = self.state.windows
        fitting = [d for d in deployments if windows.fits(name, d, prompt_tokens, now, believed, trials)]
        deployments = fitting or deployments
        snapshot = self.stats.snapshot()
        self._hear_others(model, snapshot, now)
        options = [self._option(name, d.name, d, snapshot, now) for d in deployments]
        length = request_shape(request)
        expected = self.lengths.forecast(length, max_tokens, float(policy.default_output_tokens)).mean
        session = request.session
        valid, breaks = kind_terms(options, snapshot, name, policy, preferences, request.kind, now)
        cached = cached_on(name, session, deployments, preferences, prompt_tokens, snapshot)
        shape = Shape(prompt_tokens, expected, cached, valid)
        stay = staying(session, deployments, preferences)
        weights = self._weights_of(policy, preferences.sort)
        counts = self.counts.get(name)
        if counts is None:
            counts = self.counts[name] = Counts()
        counts.requests += 1
        steered = preferences.steers
        if stream and not steered:
            self.budget.streamed(name, now)
        if stream and policy.hedging:
            self.state.hedges.credit(name, policy.hedge_budget)
        # ``explore_share = 0``: no look, no draw; only a stream's cold start (and its race) remains.
        looks = policy.explore_share > 0
        may_race = stream and policy.explore_race and not steered
        choice = choose_for(
            options,
            breaks,
            shape,
            weights,
            now,
            self.rng,
            may_race=may_race,
            budget=self.budget if looks else None,
            model=name,
            explore=stay is None and (looks or may_race),
        )
        choice = Choice(tuple(range(len(options))), choice.costs) if policy.ranking == "fixed" else choice
        counts.explored += choice.explored
        counts.races += bool(choice.race) and not choice.cold
        counts.shadows += choice.shadow is not None
        counts.cold_starts += choice.cold
        order = as_preferred(stay_first(list(choice.order), deployments, session, stay), deployments, preferences)
        if not order:
            raise InvalidRequest(f"'provider.order' names no deployment of model '{name}'", param="provider")
        race = choice.race if list(choice.race) == order[: len(choice.race)] else ()
        candidates = candidates_of(
            request,
            policy,
            options,
            choice,
            order,
            race,
            snapshot,
            now,
            providers=self._providers,
            state=self.state,
            stay=stay,
            steered=steered,
        )
        for candidate in candidates:
            self._lengths_of[id(candidate)] = (length, max_tokens)
        if trials:
            self.state.trials.planned(name, candidates, [c.name for c in candidates], trials)
        shadow = None
        if choice.shadow is not None and choice.shadow != order[0]:
            d = deployments[choice.shadow]
            shadow = Candidate(d, self._providers[d.provider], reason="explore", model=name)
            self._lengths_of[id(shadow)] = (length, max_tokens)
        if len(self._lengths_of) > 100_000:
            self._lengths_of.clear()  # plans whose candidates were never tried
        first = candidates[0]
        self.events.decision(name, first.name, first.provider.name, first.reason)
        raced = tuple(deployments[i].name for i in race[:-1])
        # Every field in order (``gateway.frozen``): candidates, policy, ranking, race, affinity, shadow.
        return route_plan_from_fields(tuple(candidates), policy, None, raced, None, shadow)

    def _weights_of(self, policy: PolicyConfig, sort: Sort | None) -> Weights:
        entry = self._weights.get((id(policy), sort))
        if entry is None or entry[0] is not policy:
            if len(self._weights) > 64:
                self._weights.clear()  # policies replaced by reloads
            entry = self._weights[(id(policy), sort)] = (policy, Weights.of(policy, sort))
        return entry[1]

    def _option(
        self, model: str, name: str, deployment: DeploymentConfig, snapshot: StatsSnapshot, now: float
    ) -> Option:
        """The deployment's belief as this request should see it: its prior, and any attempt running there."""
        belief = self.belief(model, name)
        prior = self.priors.get((model, name), NO_PRIOR)
        running = self._open.get((model, name))
        if running:  # what its attempts under way say (``gateway.routing.belief_running``)
            belief = self.running.view((model, name), belief, prior, running, now, self._bytes_per_token)
        return new_tuple(Option, (deployment, belief, prior, bool(running)))  # ``Option(...)``, no Python frame

    # -- attempts ---------------------------------------------------------------------------

    def at_capacity(self, candidate: Candidate) -> bool:
        return not self.state.has_room(candidate.provider, (candidate.model, candidate.name), self.clock())

    def capacity_reopens_in_s(self) -> float | None:
        now = self.clock()
        at = self.state.capacity.next_change(now)
        return at - now if at is not None else None

    def cooldown_s(self, candidate: Candidate) -> float:
        return self.state.health.retry_in((candidate.model, candidate.name), self.clock())

    def attempt_started(self, candidate: Candidate, *, retry: bool = False) -> bool:
        if self.at_capacity(candidate):
            return False
        key = (candidate.model, candidate.name)
        now = self.clock()
        if not self.state.health.admit(key, now, self._circuit_changed) and not retry:
            return False
        self.state.started(candidate.provider.name, key, id(candidate))
        attempt = RunningAttempt(key, now, self._lengths_of.pop(id(candidate), None))
        self._attempts[id(candidate)] = attempt
        self._open.setdefault(key, {})[id(candidate)] = attempt
        self.running.moved(key)
        (self.counts.get(candidate.model) or self.counts.setdefault(candidate.model, Counts())).attempts += 1
        return True

    def attempt_streaming(self, candidate: Candidate, progress: StreamProgress) -> None:
        attempt = self._attempts.get(id(candidate))
        if attempt is not None:
            attempt.first_at = self.clock()
            attempt.progress = progress
            self.running.moved(attempt.key)
        self.state.health.answering((candidate.model, candidate.name), self.clock(), self._circuit_changed)

    def attempt_finished(
        self,
        candidate: Candidate,
        sample: Sample,
        retry_after_s: float | None = None,
        limits: RateLimits | None = None,
        *,
        reason: str | None = None,
    ) -> None:
        key = (candidate.model, candidate.name)
        now = self.clock()
        ident = id(candidate)
        attempt = self._attempts.pop(ident, None)
        open_attempts = self._open.get(key)
        if open_attempts is not None:
            open_attempts.pop(ident, None)
        self.running.moved(key)
        state = self.state
        outcome, status = sample.outcome, sample.status  # read once: each a Python attribute look-up
        out = state.capacity.observe(
            candidate.provider,
            key,
            ok=outcome == "ok",
            status=status,
            in_flight=state.deployment_in_flight.get(key, 0),
            in_flight_at_send=state.sent_in_flight.get(ident),
            limits=limits,
            retry_after_s=retry_after_s,
            sent_at=attempt.started_at if attempt is not None else None,
            now=now,
        )
        state.finished(candidate.provider.name, key, ident)
        if state.trials.running:
            state.trial_ended(candidate, outcome)
        model = self._model_of.get(candidate.model)  # ``config.model``'s: the first of that name
        if model is None:
            return
        policy = self.config.policies[model.policy]  # ``config.policy_for``'s, without its interpreted frame
        self._evidence(model, key, sample, attempt, now)
        load_refusal = status == 429 and limits is not None and limits.has_budget and not out
        # Whether the failure chance, this attempt included, is believed over one half. The circuit's own test (most
        # of its last attempts failed) lags behind a change once requests stop going there: a provider that went
        # down after a hundred answers opens only when twenty attempts have mostly failed.
        fails, oks = self.belief(key[0], key[1]).failure(now)  # not ``belief(*key)``: a generic call when compiled
        state.health.record(
            key,
            "client_cancelled" if load_refusal else outcome,
            retry_after_s,
            policy,
            now,
            self._circuit_changed,
            rate_limited=status == 429 and not load_refusal,
            mostly_failing=fails > oks,
            unservable=status in UNSERVABLE_STATUSES,
            reason=reason,
        )

    def _evidence(
        self, model: ModelConfig, key: DeploymentKey, sample: Sample, attempt: RunningAttempt | None, now: float
    ) -> None:
        """One finished attempt of this replica as evidence (``belief_attempts.tell``), the other replicas' answers
        that ended before it heard first (``_hear_others``); an answer also teaches its deadlines, its length and
        its API's bytes per token."""
        if not tells(sample):
            return
        self._hear_others(model, self.stats.snapshot(), now)
        answer = answer_of(sample)
        self._tell(key, answer, now, now - attempt.started_at if attempt is not None else None)
        if answer.outcome == "ok" or answer.drained:
            self.state.deadlines.observe(key, sample.chunk_gaps_s)
            tokens = sample.output_tokens  # read once: a Python attribute look-up
            if answer.outcome == "ok" and tokens is not None and attempt and attempt.length:
                self.lengths.heard(attempt.length[0], tokens, attempt.length[1])
            if attempt is not None and attempt.progress is not None and tokens:
                bytes_per_token(self._bytes_per_token, attempt.progress, tokens)

    def _hear_others(self, model: ModelConfig, snapshot: StatsSnapshot, now: float) -> None:
        """Tell the beliefs the other replicas' answers not heard yet (``gateway.routing.belief_others``), each as
        its replica heard it: by the same rule as this replica's own, at the time it ended (as long ago before now
        as it was recorded before the snapshot was taken), never before what the belief heard last."""
        new = self.others.new_of(snapshot, model)
        for key, answer in new:
            belief = self.belief(key[0], key[1])
            at = now - max(0.0, snapshot.taken_at - answer.at)
            for heard in (belief.heard_at, belief.failures.heard_at):
                at = at if heard is None else max(at, heard)
            self._tell(key, answer, at, answer.attempt_s)

    def _tell(self, key: DeploymentKey, answer: Answer, at: float, elapsed_s: float | None) -> None:
        """Tell ``key``'s belief one answer (``belief_attempts.tell``) and, where its level or scatter moved, pool its
        model's priors again (a failure alone leaves every prior as it was)."""
        belief = self.belief(key[0], key[1])
        answers = belief.answers
        tell(belief, self.priors.get(key, NO_PRIOR), answer, at, elapsed_s)
        if belief.answers != answers:
            self._pool(key[0], at, key)

    def _pool(self, model: str, now: float, heard: DeploymentKey) -> None:
        """Each of ``model``'s deployments' prior, pooled from the others' beliefs, after ``heard``'s level or scatter
        moved. ``heard``'s own prior reads the others only, none of which moved: it stays (the same floats; what
        ``pooled`` reads of a belief is its answers, noise, scatter and levels' means, none of which moves unheard)."""
        keys = [k for k in self.beliefs if k[0] == model]
        skip = keys.index(heard) if heard in self.priors and heard in keys else -1
        if len(keys) == (1 if skip >= 0 else 0):
            return  # none to pool: ``heard`` is its model's only deployment, and has its prior
        kept = self._pools.get(model)
        if kept is None or kept[0] != keys:
            kept = self._pools[model] = (keys, Pool([self._price_of.get(k) for k in keys]))
        for i, k in enumerate(keys):  # only an entry whose belief heard is read again
            kept[1].hear(i, self.beliefs[k], now)
        for k, prior in zip(keys, kept[1].pooled(skip), strict=True):
            if prior is not None:
                self.priors[k] = prior

    # -- the rest of ``Router`` -------------------------------------------------------------

    def continuation_refused(self, candidate: Candidate) -> None:
        self.state.refused_continuation[(candidate.model, candidate.name)] = self.clock() + 600.0

    def may_continue(self, candidate: Candidate) -> bool:
        until = self.state.refused_continuation.get((candidate.model, candidate.name))
        return until is None or until <= self.clock()

    def context_exceeded(self, candidate: Candidate, limit: int | None) -> None:
        if limit is not None:
            self.state.windows.learn((candidate.model, candidate.name), limit, self.clock())

    def context_window(self, candidate: Candidate) -> int | None:
        return self.state.windows.window(candidate.model, candidate.deployment)

    def input_refused(self, candidate: Candidate, kind: InputKind, words: str) -> None:
        self.state.inputs.learn((candidate.model, candidate.name), kind, words, self.clock())

    def try_hedge(self, plan: RoutePlan) -> bool:
        if not plan.candidates:
            return False
        return bool(plan.race) or self.state.hedges.take(plan.candidates[0].model)

    def in_flight(self, model: str, deployment: str) -> int:
        return self.state.deployment_in_flight.get((model, deployment), 0)

    def _circuit_changed(self, key: DeploymentKey, state: CircuitState) -> None:
        provider = self._provider_of.get(key, key[1])
        self.events.circuit_changed(key[0], key[1], provider, state)
        if state == "closed":
            self.state.capacity.restart(key)
        if state != "open":
            belief = self.beliefs.get(key)
            if belief is not None:
                belief.failures.recovered(self.clock())
