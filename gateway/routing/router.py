"""The measured router: ranks a model's deployments for each request and explains why.

``plan`` runs on the request path and does no I/O: it reads the stats store's local
snapshot and the router's own fast view of each deployment (``MeasuredMemory.views``, fed by
``attempt_finished``), scores every deployment for this request (``gateway.routing.score``),
and orders them:

1. The request's overrides: ``only``/``ignore`` and ``max_price`` remove deployments;
   ``order`` puts the named ones first; ``allow_fallbacks = false`` keeps only those.
2. Deployments that break a soft constraint go after those that do not, and those with
   nothing measured yet after those with their own numbers; then by score (or in config
   order for a ``fixed`` policy).
3. Near-equal scores (within ``tie_band`` of the best) go to the deployment with fewer
   requests in flight, ties broken at random, so replicas do not stampede one provider; for a
   long answer, only deployments that stream about as fast as the best share such a tie.
4. A deployment whose circuit is open is left out; if nothing is left the request fails fast
   with 503 (429 when every one is rate limited). One whose provider is full (at its learned
   limit under ``max_concurrency``, ``gateway.routing.capacity``) stays in: the attempt loop
   overflows past it to one with room, or waits for a slot (``gateway.relay.queue``).
5. Exploration (``gateway.routing.explore``): a cold deployment is measured at once; an
   uncertain or stale one whose optimistic score beats the leader's is measured on a cheap
   request, within ``explore_share``, racing the leader on a stream.
6. Hedging thresholds per candidate (``gateway.routing.hedge``).

Randomness comes from an injected ``random.Random`` and time from an injected clock, so
tests are deterministic.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.config import GatewayConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.errors import InvalidRequest
from gateway.events import GatewayEvents, NoEvents
from gateway.routing.affinity import cache_terms, decide, keep_bound_first
from gateway.routing.apis import speaking
from gateway.routing.capacity import ProviderLimit, RateLimits
from gateway.routing.estimates import DeploymentView, observation_from_fields, pooled_spreads
from gateway.routing.explore import (
    ExploreBudget,
    ExploreCounts,
    Probe,
    RequestSizes,
    choose_partner,
    choose_probe,
    measured,
    on_trial,
)
from gateway.routing.filters import allowed, matches
from gateway.routing.health import FAILURES, RouterState
from gateway.routing.hedge import hedge_after
from gateway.routing.lengths import Forecast, answer_tokens, planned_length, shape_of
from gateway.routing.ordering import backup_time, slow_start, spread_near_equal
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.plan import (
    Candidate,
    RoutePlan,
    RouteRequest,
    SessionRoute,
    SnapshotSource,
    candidate_from_fields,
    route_plan_from_fields,
)
from gateway.routing.predict import WINDOW_METRIC
from gateway.routing.prefill import split
from gateway.routing.ranking import Ranked, Ranking, no_capacity, ranked_from_fields, ranking_from_fields
from gateway.routing.score import Weights, expected_output, score_all
from gateway.routing.scored import OutputSource, RequestShape, Scored, request_shape_from_fields
from gateway.samples import Endpoint, RequestKind, Sample
from gateway.stats import Metric, StatsSnapshot
from gateway.stats.snapshot import cache_values
from gateway.types import CircuitState, Clock, DeploymentKey, RouteReason, StreamProgress

logger = logging.getLogger("gateway")
NOT_CONTINUABLE_S = 600.0
"""How long a deployment that refused a continuation (a 4xx to a prefill) is not asked for one again."""
TYPICAL_OUTPUT_TTL_S = 1.0
"""How long a model's observed answer length is reused before it is looked up again."""


@dataclass
class MeasuredMemory:
    """What the measured router learns between requests beside the shared ``RouterState``: its fast view of each
    deployment and its exploration's budget, request sizes and counts. Carried over from one config to the next as
    the state is (``gateway.routing.serving.build_router`` hands the previous router's on)."""

    views: dict[str, dict[str, DeploymentView]] = field(default_factory=dict)
    """The router's own fast view of each deployment (by model, then deployment): its recent answers here."""
    explore: ExploreBudget = field(default_factory=ExploreBudget)
    sizes: dict[str, RequestSizes] = field(default_factory=dict)
    """Each model's recent request sizes: what a cheap request to explore on is."""
    counts: ExploreCounts = field(default_factory=ExploreCounts)
    window_s: float = 300.0
    """The shared stats window's length (``stats.window_s``)."""

    def view(self, key: DeploymentKey, half_life_s: float) -> DeploymentView:
        views = self.views.get(key[0])
        if views is None:  # made only when missing (a ``setdefault`` made a dict per call to throw away)
            views = self.views[key[0]] = {}
        view = views.get(key[1])
        if view is None:
            view = views[key[1]] = DeploymentView(half_life_s, self.window_s)
        view.half_life_s = half_life_s  # a reload may change the policy's memory
        return view

    def views_of(self, model: str) -> dict[str, DeploymentView]:
        views = self.views.get(model)
        return views if views is not None else {}  # an empty dict only when none (a default made one per call)


class MeasuredRouter:
    """Implements ``Router``. Usage::

    router = MeasuredRouter(config, stats_store, rng=random.Random(7))
    plan = router.plan(route_request)            # ordered candidates
    router.rank(model, prompt_tokens=500)        # the same ranking, to explain it
    """

    def __init__(
        self,
        config: GatewayConfig,
        stats: SnapshotSource,
        *,
        state: RouterState | None = None,
        memory: MeasuredMemory | None = None,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        events: GatewayEvents | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.state = state if state is not None else RouterState()
        self.state.window_s = float(config.stats.window_s)  # a float for the compiled router
        self.memory = memory if memory is not None else MeasuredMemory()
        self.memory.window_s = self.state.window_s
        self.rng = rng if rng is not None else random.Random()
        self.clock = clock
        self.events: GatewayEvents = events if events is not None else NoEvents()
        self._providers = {p.name: p for p in config.providers}
        self._provider_of = {(m.name, d.name): d.provider for m in config.models for d in m.deployments}
        self._models: dict[str, ModelConfig] = {}
        """``config.model``'s answers, by name (the first model of each name, as its walk finds): every attempt's start
        and end looks its model up, and the config's own walk is an interpreted call from the compiled router."""
        for m in config.models:
            self._models.setdefault(m.name, m)
        self._typical_output: dict[str, tuple[float, int, OutputSource]] = {}
        self.lengths = self.state.lengths
        """What this model's answers actually were, per request shape, key and session (``gateway.routing.lengths``)."""
        self._speaking: dict[tuple[str, Endpoint | None], tuple[ModelConfig, ModelConfig]] = {}

    def _expected_output(
        self, model: str, max_tokens: int | None, snapshot: StatsSnapshot | None, policy: PolicyConfig, now: float
    ) -> tuple[int, OutputSource]:
        """``expected_output``, with the model's observed answer length reused for a second: finding it
        merges every deployment's histogram, and a typical length does not move from one request to the next.
        ``snapshot``: None to take the stats store's only when the kept length is too old (``forecast``: the plan
        takes one for its ranking right after, and a snapshot is a window expiry and an object per call)."""
        if max_tokens is not None:
            return max_tokens, "request"
        cached = self._typical_output.get(model)
        if cached is not None and now - cached[0] < TYPICAL_OUTPUT_TTL_S:
            return cached[1], cached[2]
        if snapshot is None:
            snapshot = self.stats.snapshot()
        output, source = expected_output(model, None, snapshot, policy)
        self._typical_output[model] = (now, output, source)
        return output, source

    def _speaking_of(self, model: ModelConfig, endpoint: Endpoint | None, pinned: str | None) -> ModelConfig:
        """``speaking``, kept per model and API: the config is immutable, and narrowing it copies the model's
        config (``dataclasses.replace``) on every request. Kept only for this very ``model`` object, and not
        for a pinned request (its deployment names come from stored state, not the config)."""
        if pinned is not None:
            return speaking(model, endpoint, pinned)
        key = (model.name, endpoint)
        kept = self._speaking.get(key)
        if kept is not None and kept[0] is model:
            return kept[1]
        narrowed = speaking(model, endpoint)
        self._speaking[key] = (model, narrowed)
        return narrowed

    # -- ranking --------------------------------------------------------------------------------

    def rank(
        self,
        model: ModelConfig,
        *,
        endpoint: Endpoint | None = None,
        prompt_tokens: int = 500,
        max_tokens: int | None = None,
        preferences: ProviderPreferences = NO_PREFERENCES,
        rng: random.Random | None = None,
        pinned: str | None = None,
        session: SessionRoute | None = None,
        kind: RequestKind | None = None,
        length: Forecast | None = None,
    ) -> Ranking:
        """Score and order ``model``'s deployments for a request of this shape (no side effects but ``rng``).

        With an ``endpoint``, only the deployments that speak that API are ranked (``None``: all of them,
        to explain a model); with ``pinned``, only that deployment. With a ``session`` bound to a
        deployment, that one is predicted warm and the others cold (``gateway.routing.affinity``). ``kind``: what
        the request asks of its answer (tools, JSON, plain), whose valid rate judges each deployment (None: all).
        ``length``: the request's predicted answer (``forecast``), planned for; without it, ``max_tokens`` is taken
        as the answer's length (to explain a ranking for answers of that length), else the model's observed one.
        """
        policy = self.config.policies[model.policy]  # ``policy_for``, without its interpreted frame
        snapshot = self.stats.snapshot()
        deployments = allowed(self._speaking_of(model, endpoint, pinned), preferences, self._providers)
        now = self.clock()
        if length is not None:
            output, source = max(1, round(planned_length(length, policy))), length.source
        else:
            output, source = self._expected_output(model.name, max_tokens, snapshot, policy, now)
        shape = request_shape_from_fields(endpoint or "chat", prompt_tokens, output, source, kind)
        views = self.memory.views_of(model.name)
        cache = cache_terms(session, deployments, preferences)
        scored = score_all(model.name, deployments, shape, snapshot, policy, preferences, views, now, cache)
        rows = [self._ranked(model.name, s, policy, now) for s in scored]
        if len(rows) < 2:
            pass  # one row (a model of one deployment): none of the orderings below moves it (nor draws)
        elif policy.ranking == "fixed":
            rows.sort(key=lambda r: bool(r.scored.violations))  # stable: score_all kept the config's order
        else:
            # A deployment with nothing measured goes after the others: it gets traffic by exploring
            # (a bounded share), not by a score that rests on the model's average. Unless price
            # leads: a price is known without measuring anything. One measured on a few answers
            # competes on them: if they flatter it, the traffic it wins soon corrects them.
            weights = Weights.of(policy, preferences.sort)
            price_led = weights.price > weights.time + weights.ttft + weights.throughput
            if not price_led and all(r.scored.prediction.time_s is None for r in rows):
                # Nothing measured anywhere yet: no score worth following, so spread the requests that
                # arrive before the first answers instead of piling them on the cheapest (a stream races
                # them all instead: ``choose_probe``'s blind cold race).
                rows.sort(key=lambda r: (bool(r.scored.violations), r.in_flight, r.scored.ranked_by))
            else:
                rows.sort(key=lambda r: (bool(r.scored.violations), not (r.known or price_led), r.scored.ranked_by))
                rows = spread_near_equal(rows, policy.tie_band, rng, shape)
                rows = slow_start(rows)
        rows = keep_bound_first(rows, session, policy, preferences)
        if preferences.order:
            rows = _apply_order(rows, preferences)
        if not preferences.allow_fallbacks:
            # Without fallbacks only the listed deployments, or else the best available one, may serve.
            if preferences.order:
                rows = _listed(rows, preferences.order)
            elif rows:
                rows = [next((r for r in rows if r.available), rows[0])]
            if not rows:
                raise InvalidRequest(
                    f"'provider.order' names no deployment of model '{model.name}' and allow_fallbacks is false",
                    param="provider.order",
                )
        if len(rows) > 1:
            rows.sort(key=lambda r: not r.available)  # stable: unavailable ones last, order kept
        counts = self.memory.counts
        name = model.name
        return ranking_from_fields(  # every field, in order (``gateway.frozen``)
            model,
            policy,
            shape,
            tuple(rows),
            snapshot,
            counts.requests.get(name, 0),  # ``[name]`` of a name never counted: a Python ``__missing__``, the same 0
            counts.probes.get(name, 0),
            counts.races.get(name, 0),
            counts.first_looks.get(name, 0),
            counts.cold_starts.get(name, 0),
            0,  # shadows: the belief router's
            None,  # extra_attempts: likewise
            policy.ranking != "fixed" and on_trial(rows, shape),  # trial (the dashboard's)
        )

    def _ranked(self, model: str, scored: Scored, policy: PolicyConfig, now: float) -> Ranked:
        key = (model, scored.deployment.name)
        provider = self._providers[scored.deployment.provider]
        state = self.state
        in_flight = state.deployment_in_flight.get(key, 0)
        capacity = state.capacity.of(provider, key)
        blocked_until = state.capacity.blocked_until(provider, key)
        health = state.health
        if key in health.circuits:
            circuit = health.state(key, now, self._circuit_changed)
            retry_in, rate_limited = health.retry_in(key, now), health.rate_limited(key)
        else:
            circuit, retry_in, rate_limited = "closed", 0.0, False  # never failed: what those three say of no circuit
        reset_at = capacity.reset_at
        # Every field, in order (a name match per keyword, per deployment per plan; ``gateway.frozen``).
        return ranked_from_fields(
            model,
            scored,
            provider,
            circuit,
            in_flight,
            state.provider_in_flight.get(provider.name, 0),  # provider_in_flight
            scored.prediction.attempts >= policy.min_samples,  # judged
            retry_in,  # retry_in_s
            rate_limited,
            capacity.allowed,  # limit
            max(0.0, blocked_until - now),  # blocked_in_s
            capacity.remaining_requests,
            capacity.remaining_tokens,
            max(0.0, reset_at - now) if reset_at is not None else None,  # reset_in_s
            None,  # belief: the belief router's
        )

    # -- Router ---------------------------------------------------------------------------------

    def forecast(self, request: RouteRequest) -> Forecast:
        """The request's answer length, predicted from what its model's answers to requests like it were (for this
        key and session); ``max_tokens`` caps it. Before the model's first answer with a ``max_tokens``, that ceiling
        is all there is; without one, the model's observed length (the shared window), else the policy's default."""
        model = request.model
        key = shape_of(
            model.name,
            request.max_tokens,
            api=request.endpoint,
            stream=request.stream,
            kind=request.kind,
            client=request.client,
            session=request.session.key if request.session is not None else None,
        )
        if request.max_tokens is not None:
            return self.lengths.forecast(key, request.max_tokens, float(request.max_tokens), "request")
        policy = self.config.policies[model.policy]  # ``policy_for``
        typical, source = self._expected_output(model.name, None, None, policy, self.clock())
        return self.lengths.forecast(key, None, float(typical), source)

    def plan(self, request: RouteRequest) -> RoutePlan:
        model, preferences = request.model, request.preferences
        self.state.asked[model.name] += 1
        length = self.forecast(request)
        ranking = self.rank(
            model,
            endpoint=request.endpoint,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            preferences=preferences,
            rng=self.rng,
            pinned=request.pinned,
            session=request.session,
            kind=request.kind,
            length=length,
        )
        policy = ranking.policy
        rows = [r for r in ranking.rows if r.available]
        if not rows:
            raise no_capacity(model.name, ranking.rows)
        windows = self.state.windows
        fitting = [r for r in rows if windows.fits(model.name, r.scored.deployment, request.prompt_tokens)]
        if fitting:
            rows = fitting  # else none fits: the provider's own 400 will say why
        steers = preferences.steers
        first_reason: RouteReason = "override" if steers else "best-score"
        affinity = decide(request.session, ranking.rows, rows[0], preferences) if request.session else None
        staying = affinity is not None and affinity.choice == "stay"
        if staying:
            first_reason = "affinity"
        # A session that stays is not explored away from its cache (that would cost it the cache's worth).
        explore = not steers and not staying
        probe, partner = (
            self._probe(model.name, rows, policy, ranking.shape, request.stream) if explore else (None, None)
        )
        race: list[Ranked] = []
        shadow = probe.row if probe is not None and probe.shadow else None
        if partner is not None and partner.shadow:  # beside the race, unseen: no race of it was cheap
            shadow, partner = partner.row, None
        if probe is not None and not probe.shadow:
            racing = [probe.row, *probe.others, *([partner.row] if partner is not None else [])]
            for row in reversed(racing):
                rows.remove(row)
                rows.insert(0, row)
            if probe.race:
                race = racing
            first_reason = "explore"
        leader_after: float | None = None
        if probe is not None and probe.race and len(rows) > len(race):
            # The leader races at once beside the probes (a cold race's only if it is measured: else it is a fallback).
            leader_after = 0.0 if not probe.cold or measured(rows[len(race)]) else None
        hedging = request.stream and policy.hedging
        if hedging:
            self.state.hedges.credit(model.name, policy.hedge_budget)
        # A leader on one lucky-looking answer races the next well-measured deployment (a hedge at once).
        trial = hedging and probe is None and explore and policy.explore_race and on_trial(rows, ranking.shape)
        now = self.clock()
        candidates = []
        shadowed: Candidate | None = None
        for i, row in enumerate(rows):
            after = None
            if i < len(race):
                # Racers start at once, one after the other; the leader after the last of them.
                after = 0.0 if i + 1 < len(race) else leader_after
            elif trial and i == 0:
                after = 0.0  # the next deployment starts beside it at once (``explore.on_trial``)
            elif hedging:
                backup = backup_time(row, rows[i + 1], ranking.shape) if i + 1 < len(rows) else None
                after = hedge_after(
                    policy, ranking.snapshot, model.name, row.deployment.name, backup, self.state.tails, now
                )
            reason: RouteReason = first_reason if i == 0 else "fallback"
            if 0 < i < len(race):
                reason = "explore"
            deployment = row.scored.deployment  # the ``Ranked.deployment`` property's, without its Python frame
            key = (model.name, deployment.name)
            # ``snapshot.get``, without its Python frame
            deadlines = self.state.deadlines.of(key, policy, ranking.snapshot.summaries.get(key), now)
            prediction = row.scored.prediction
            candidate = candidate_from_fields(  # every field, in order (``gateway.frozen``)
                deployment,
                row.provider,
                reason,
                model.name,
                after,  # hedge_after_s
                prediction.time_s,  # predicted_s
                prediction.ttft_s if request.stream else None,  # predicted_first_token_s
                deadlines.first_token_s if deadlines is not None else None,  # first_token_timeout_s
                deadlines.idle_s if deadlines is not None else None,  # idle_timeout_s
                prediction.prefill_tokens_per_s,
                trial and i == 0,  # on_trial
                length,
            )
            candidates.append(candidate)
            if row is shadow:
                shadowed = dataclasses.replace(candidate, reason="explore", hedge_after_s=None)
        first = candidates[0]
        self.events.decision(model.name, first.deployment.name, first.provider.name, first_reason)
        if affinity is not None:
            self.events.session_routed(model.name, first.name, affinity.choice, affinity.reason)
        return route_plan_from_fields(  # every field, in order (``gateway.frozen``)
            tuple(candidates),
            policy,
            ranking,
            tuple(row.deployment.name for row in race),  # race
            affinity,
            shadowed,  # shadow
            length,
        )

    def _probe(
        self, model: str, rows: Sequence[Ranked], policy: PolicyConfig, shape: RequestShape, stream: bool
    ) -> tuple[Probe | None, Probe | None]:
        """Exploration's choice for this request (``gateway.routing.explore``), with the budget and counts kept:
        the probe, and the second contender racing beside it (``choose_partner``; the request counts once)."""
        memory = self.memory
        sizes = memory.sizes.get(model)
        if sizes is None:
            sizes = memory.sizes[model] = RequestSizes()
        sizes.add(shape.output_tokens, shape.prompt_tokens)
        memory.explore.credit(model, policy.explore_share)
        memory.counts.requests[model] += 1
        follow_ups: set[str] = set()
        stream_probed: set[str] = set()
        probed_at: dict[str, float] = {}
        for name, view in memory.views_of(model).items():  # one pass over the views, every request
            probed_at[name] = view.probed_at
            if view.follow_ups > 0:
                follow_ups.add(name)
            if view.stream_probed:
                stream_probed.add(name)
        now = self.clock()
        probe = choose_probe(
            rows,
            policy,
            shape,
            budget=memory.explore.available(model),
            cheap=sizes.cheap(shape),
            stream=stream,
            rng=self.rng,
            follow_ups=follow_ups,
            probed_at=probed_at,
            now=now,
            stream_probed=stream_probed,
        )
        if probe is None:
            return None, None
        partner = choose_partner(rows, probe, shape, rng=self.rng, probed_at=probed_at, now=now)
        target = memory.view((model, probe.row.deployment.name), policy.memory_half_life_s)
        target.probed_at = now
        for other in (*probe.others, *([partner.row] if partner is not None else [])):
            memory.view((model, other.deployment.name), policy.memory_half_life_s).probed_at = now
        if probe.follow_up:
            target.follow_ups -= 1
        if probe.for_stream:
            target.stream_probed = True
        if probe.cold_start:
            # Nothing is measured: there is no score to explore away from, and racing them all is this request's
            # best route. A cold start, counted apart; the budget is for looks away from a known leader.
            memory.counts.cold_starts[model] += 1
            return probe, partner
        memory.explore.take(model)
        memory.counts.probes[model] += 1
        if probe.cold:
            memory.counts.first_looks[model] += 1
        if probe.race:
            memory.counts.races[model] += 1
        return probe, partner

    def at_capacity(self, candidate: Candidate) -> bool:
        return not self.state.has_room(candidate.provider, (candidate.model, candidate.deployment.name), self.clock())

    def capacity_reopens_in_s(self) -> float | None:
        now = self.clock()
        at = self.state.capacity.next_change(now)
        return at - now if at is not None else None

    def cooldown_s(self, candidate: Candidate) -> float:
        return self.state.health.retry_in((candidate.model, candidate.name), self.clock())

    def capacity_of(self, provider: ProviderConfig) -> ProviderLimit:
        """The provider's deployments' learned limits and reported budgets, taken together (for metrics)."""
        return self.state.capacity.provider_view(provider)

    def attempt_started(self, candidate: Candidate, *, retry: bool = False) -> bool:
        if self.at_capacity(candidate):
            return False
        key = (candidate.model, candidate.deployment.name)  # ``candidate.name``, without the property's frame
        now = self.clock()
        if not self.state.health.admit(key, now, self._circuit_changed) and not retry:
            return False
        self.state.started(candidate.provider.name, key, id(candidate))
        model = self._models.get(candidate.model)  # ``config.model``
        if model is not None:
            view = self.memory.view(key, self.config.policies[model.policy].memory_half_life_s)  # ``policy_for``'s
            view.started(id(candidate), now, candidate.predicted_s, candidate.predicted_first_token_s)
        return True

    def attempt_streaming(self, candidate: Candidate, progress: StreamProgress) -> None:
        view = self.memory.views_of(candidate.model).get(candidate.deployment.name)
        if view is not None:
            view.streaming(id(candidate), self.clock(), progress)

    def attempt_finished(
        self,
        candidate: Candidate,
        sample: Sample,
        retry_after_s: float | None = None,
        limits: RateLimits | None = None,
    ) -> None:
        key = (candidate.model, candidate.deployment.name)  # ``candidate.name``, without the property's frame
        provider = candidate.provider
        in_flight = self.state.deployment_in_flight.get(key, 0)
        view = self.memory.views_of(candidate.model).get(key[1])
        # A drained loser's stream was read as far as it went: its bytes per token are as good as an answer's.
        complete_stream = sample.stream and (sample.outcome == "ok" or _drained(sample))
        started_at = (
            view.ended(id(candidate), self.clock(), sample.output_tokens if complete_stream else None)
            if view is not None
            else None
        )
        out = self.state.capacity.observe(
            provider,
            key,
            ok=sample.outcome == "ok",
            status=sample.status,
            in_flight=in_flight,
            in_flight_at_send=self.state.sent_in_flight.get(id(candidate)),
            limits=limits,
            retry_after_s=retry_after_s,
            sent_at=started_at,
            now=self.clock(),
        )
        self.state.finished(provider.name, key, id(candidate))
        tokens = answer_tokens(sample)
        if tokens is not None and candidate.length is not None:
            self.lengths.heard(candidate.length.key, tokens, candidate.length.max_tokens)
        model = self._models.get(candidate.model)  # ``config.model``
        if model is None:
            return  # a reload removed the model while the attempt ran
        policy = self.config.policies[model.policy]  # ``policy_for``
        self._observe(key, sample, policy, started_at)
        # A 429 that reports budget left refused the load, not the caller: the learned limit has
        # backed off, and the circuit neither opens nor counts it (it is neutral, as a cancellation
        # is: it says nothing of the provider's health). Any other 429 (or one saying the provider is
        # out) opens the circuit at once, as the provider asked.
        load_refusal = sample.status == 429 and limits is not None and limits.has_budget and not out
        self.state.health.record(
            key,
            "client_cancelled" if load_refusal else sample.outcome,
            retry_after_s,
            policy,
            self.clock(),
            self._circuit_changed,
            rate_limited=sample.status == 429 and not load_refusal,
        )

    def _observe(self, key: DeploymentKey, sample: Sample, policy: PolicyConfig, started_at: float | None) -> None:
        """Feed one finished attempt to the deployment's fast view."""
        now = self.clock()
        view = self.memory.view(key, policy.memory_half_life_s)
        drained = _drained(sample)
        if sample.outcome == "ok" or drained:
            views = self.memory.views_of(key[0])
            # The model's other deployments' spreads: none when this is its only one (``pooled_spreads`` of nothing).
            others = (v for name, v in views.items() if name != key[1])
            view.prior_spreads = pooled_spreads(others) if len(views) > 1 else {}
            tps = sample.tokens_per_s
            self.state.deadlines.observe(key, sample.chunk_gaps_s)
            cache: dict[Metric, float] = {}
            cache_values(sample, cache)
            # The view keeps a warm first token's base latency and the prefill's own speed apart
            # (``gateway.routing.prefill``): a prediction is then base + uncached tokens x seconds per token.
            terms = split(sample, cache.get("warm_ttft_s"), cache.get("prefill_tokens_per_s"), view)
            view.add(
                observation_from_fields(  # every field, in order (``gateway.frozen``)
                    now,  # at
                    sample.ttft_s,
                    1.0 / tps if tps else None,  # seconds_per_token
                    sample.e2e_s if not drained else None,  # e2e_s
                    True,  # ok
                    None,  # failed_after_s
                    terms.base_s,  # warm_ttft_s
                    terms.prefill_s_per_token,
                    cache.get("cold_ttft_s"),  # cold_ttft_s
                    started_at,
                )
            )
        elif sample.outcome in FAILURES:
            failed_after = now - started_at if started_at is not None else None
            view.add(
                observation_from_fields(now, sample.ttft_s, None, None, False, failed_after, None, None, None, None)
            )
        elif sample.outcome == "client_cancelled" and sample.hedged:
            # It lost a race (or a hedge): its first token would have come later than this, at least.
            waited = sample.ttft_s if sample.ttft_s is not None else (now - started_at if started_at else None)
            if waited is not None and waited > 0:
                view.confirm("ttft_s", waited, now)
        changed = [metric for metric, at in view.changed_at.items() if at == now]
        if changed:
            summary = self.stats.snapshot().get(*key)
            for metric in changed:
                window = WINDOW_METRIC[metric]
                view.note_window(metric, summary.count(window) if summary is not None else 0)

    def continuation_refused(self, candidate: Candidate) -> None:
        key = (candidate.model, candidate.name)
        refused = self.state.refused_continuation
        now = self.clock()
        if refused.get(key, float("-inf")) <= now:
            logger.warning(
                "deployment %s of model %s is marked continue_prefill but refused a continuation: "
                "not continuable for the next %.0f s (check its continue_prefill and prefill_format)",
                candidate.name,
                candidate.model,
                NOT_CONTINUABLE_S,
            )
        refused[key] = now + NOT_CONTINUABLE_S

    def may_continue(self, candidate: Candidate) -> bool:
        until = self.state.refused_continuation.get((candidate.model, candidate.name))
        return until is None or until <= self.clock()

    def context_exceeded(self, candidate: Candidate, limit: int | None) -> None:
        if limit is not None and self.state.windows.learn((candidate.model, candidate.name), limit):
            logger.info(
                "deployment %s of model %s accepts at most %d tokens (learned from its context_length_exceeded)",
                candidate.name,
                candidate.model,
                limit,
            )

    def context_window(self, candidate: Candidate) -> int | None:
        return self.state.windows.window(candidate.model, candidate.deployment)

    def try_hedge(self, plan: RoutePlan) -> bool:
        if not plan.candidates:
            return False
        # A race probe's second attempt was paid for from the exploration budget.
        return plan.race_probe is not None or self.state.hedges.take(plan.candidates[0].model)

    def in_flight(self, model: str, deployment: str) -> int:
        return self.state.deployment_in_flight.get((model, deployment), 0)

    def provider_in_flight(self, provider: str) -> int:
        return self.state.provider_in_flight.get(provider, 0)

    def _circuit_changed(self, key: DeploymentKey, state: CircuitState) -> None:
        model, deployment = key
        provider = self._provider_of.get(key, deployment)
        self.events.circuit_changed(model, deployment, provider, state)
        if state == "closed":
            self.state.capacity.restart(key)


def _drained(sample: Sample) -> bool:
    """A race's loser read on for its stream (``gateway.relay.drain``): its first token (and its stream, if it
    ran long enough) measured, an answer without an end-to-end."""
    return sample.outcome == "client_cancelled" and sample.output_tokens is not None and sample.ttft_s is not None


def _listed(rows: Sequence[Ranked], order: Sequence[str]) -> list[Ranked]:
    listed = []
    for name in order:
        for row in rows:
            if matches(row.deployment, (name,)) and row not in listed:
                listed.append(row)
    return listed


def _apply_order(rows: list[Ranked], preferences: ProviderPreferences) -> list[Ranked]:
    listed = _listed(rows, preferences.order)
    return listed + [r for r in rows if r not in listed]
