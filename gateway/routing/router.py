"""The measured router: ranks a model's deployments for each request and explains why.

``plan`` runs on the request path and does no I/O: it reads the stats store's local
snapshot, scores every deployment for this request (``gateway.routing.score``), and orders
them:

1. The request's overrides: ``only``/``ignore`` and ``max_price`` remove deployments;
   ``order`` puts the named ones first; ``allow_fallbacks = false`` keeps only those.
2. Deployments that break a soft constraint go after those that do not, and those with
   nothing measured yet after those with their own numbers; then by score (or in config
   order for a ``fixed`` policy).
3. Near-equal scores (within ``tie_band`` of the best) go to the deployment with fewer
   requests in flight, ties broken at random, so replicas do not stampede one provider.
4. A deployment whose circuit is open, or whose provider is at ``max_concurrency``, is left
   out; if nothing is left the request fails fast with 503.
5. Exploration (``_explore``): a deployment with fewer than ``min_samples`` attempts in the
   window is not yet judged. At a cold start every request measures the least-measured one;
   afterwards, with probability ``explore_share``, an unjudged one or a close runner-up on
   thin evidence goes first. Old samples age out of the window, so a deployment that
   stopped being chosen becomes unjudged again and is re-measured: that is how a recovery
   is noticed, at a cost bounded by ``min_samples`` per window.

Randomness comes from an injected ``random.Random`` and time from an injected clock, so
tests are deterministic.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.config import DeploymentConfig, GatewayConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.errors import GatewayError, InvalidRequest, NoCapacity, RateLimited
from gateway.events import GatewayEvents, NoEvents
from gateway.routing.health import Answer, RouterState
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.plan import Candidate, RoutePlan, RouteRequest
from gateway.routing.score import OutputSource, RequestShape, Scored, Weights, expected_output, score_all
from gateway.samples import Endpoint, Sample
from gateway.stats import StatsSnapshot
from gateway.types import CircuitState, Clock, DeploymentKey, RouteReason

REVISIT_SAMPLES = 4
"""A close runner-up is re-measured until it has this many times ``min_samples`` attempts in the window."""
DISMISS_AFTER = 2
TYPICAL_OUTPUT_TTL_S = 1.0
"""How long a model's observed answer length is reused before it is looked up again."""
DISMISS_FACTOR = 2.0


class SnapshotSource(Protocol):
    """What the router needs of the stats store: its latest local snapshot, without I/O."""

    def snapshot(self) -> StatsSnapshot: ...


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
        self._typical_output: dict[str, tuple[float, int, OutputSource]] = {}

    def _expected_output(
        self, model: str, max_tokens: int | None, snapshot: StatsSnapshot, policy: PolicyConfig, now: float
    ) -> tuple[int, OutputSource]:
        """``expected_output``, with the model's observed answer length reused for a second: finding it
        merges every deployment's histogram, and a typical length does not move from one request to the next."""
        if max_tokens is not None:
            return max_tokens, "request"
        cached = self._typical_output.get(model)
        if cached is not None and now - cached[0] < TYPICAL_OUTPUT_TTL_S:
            return cached[1], cached[2]
        output, source = expected_output(model, None, snapshot, policy)
        self._typical_output[model] = (now, output, source)
        return output, source

    # -- ranking --------------------------------------------------------------------------------

    def rank(
        self,
        model: ModelConfig,
        *,
        endpoint: Endpoint = "chat",
        prompt_tokens: int = 500,
        max_tokens: int | None = None,
        preferences: ProviderPreferences = NO_PREFERENCES,
        rng: random.Random | None = None,
    ) -> Ranking:
        """Score and order ``model``'s deployments for a request of this shape (no side effects but ``rng``)."""
        policy = self.config.policy_for(model)
        snapshot = self.stats.snapshot()
        deployments = _filter(model, preferences, self._providers)
        now = self.clock()
        output, source = self._expected_output(model.name, max_tokens, snapshot, policy, now)
        shape = RequestShape(endpoint, prompt_tokens, output, source)
        recent = self.state.recent(model.name, now)
        scored = score_all(model.name, deployments, shape, snapshot, policy, preferences, recent)
        rows = [self._ranked(model.name, s, policy, now) for s in scored]
        if policy.ranking == "fixed":
            rows.sort(key=lambda r: bool(r.scored.violations))  # stable: score_all kept the config's order
        else:
            # A deployment with nothing measured goes after the others: it gets traffic by exploring
            # (a bounded share), not by a score that rests on the model's average. Unless price
            # leads: a price is known without measuring anything. One measured on a few answers
            # competes on them: if they flatter it, the traffic it wins soon corrects them.
            weights = Weights.of(policy, preferences.sort)
            price_led = weights.price > weights.time + weights.ttft + weights.throughput
            rows.sort(key=lambda r: (bool(r.scored.violations), not (r.known or price_led), r.scored.score))
            rows = _spread_near_equal(rows, policy.tie_band, rng)
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
        rows.sort(key=lambda r: not r.available)  # stable: unavailable ones last, order kept
        return Ranking(model, policy, shape, tuple(rows), snapshot)

    def _ranked(self, model: str, scored: Scored, policy: PolicyConfig, now: float) -> Ranked:
        key = (model, scored.deployment.name)
        provider = self._providers[scored.deployment.provider]
        in_flight = self.state.deployment_in_flight.get(key, 0)
        return Ranked(
            model=model,
            scored=scored,
            provider=provider,
            circuit=self.state.health.state(key, now, self._circuit_changed),
            in_flight=in_flight,
            provider_in_flight=self.state.provider_in_flight.get(provider.name, 0),
            judged=scored.prediction.attempts >= policy.min_samples,
            retry_in_s=self.state.health.retry_in(key, now),
            rate_limited=self.state.health.rate_limited(key),
        )

    # -- Router ---------------------------------------------------------------------------------

    def plan(self, request: RouteRequest) -> RoutePlan:
        model, preferences = request.model, request.preferences
        ranking = self.rank(
            model,
            endpoint=request.endpoint,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            preferences=preferences,
            rng=self.rng,
        )
        policy = ranking.policy
        rows = [r for r in ranking.rows if r.available]
        if not rows:
            raise _no_capacity(model.name, ranking.rows)
        first_reason: RouteReason = "override" if preferences.steers else "best-score"
        explored = None if preferences.steers else self._explore(rows, policy)
        if explored is not None:
            rows.remove(explored)
            rows.insert(0, explored)
            first_reason = "explore"
        hedging = request.stream and policy.hedging
        if hedging:
            self.state.hedges.credit(model.name, policy.hedge_budget)
        snapshot = ranking.snapshot if hedging else None
        candidates = tuple(
            Candidate(
                deployment=r.deployment,
                provider=r.provider,
                reason=first_reason if i == 0 else "fallback",
                model=model.name,
                hedge_after_s=_hedge_after(policy, snapshot, model.name, r) if snapshot is not None else None,
            )
            for i, r in enumerate(rows)
        )
        first = candidates[0]
        self.events.decision(model.name, first.name, first.provider.name, first_reason)
        return RoutePlan(candidates=candidates, policy=policy)

    def _explore(self, rows: Sequence[Ranked], policy: PolicyConfig) -> Ranked | None:
        """The deployment to measure instead of following the score, if any.

        Attempts in flight count as samples to come, so a burst of requests at a cold start is
        spread over all deployments instead of all exploring the same one. At a cold start (some
        deployment was never judged since the gateway started) and whenever no deployment is
        judged, there is no comparison worth following, and every request explores: that costs
        at most ``min_samples`` requests per deployment, and the score is trusted sooner.

        Otherwise, with probability ``explore_share``, the least-sampled of these is measured:
        deployments not judged yet, and close runners-up (within ``explore_margin`` of the best)
        resting on fewer than ``REVISIT_SAMPLES`` × ``min_samples`` attempts, so that a few
        unlucky early samples cannot shut a competitor out for a whole window.

        A deployment whose very fastest answers (after ``DISMISS_AFTER`` attempts) are more than
        ``DISMISS_FACTOR`` times slower than another's expected time is dismissed without waiting
        for ``min_samples``: measuring a hopeless provider costs real requests.
        """
        if policy.ranking == "fixed" or policy.min_samples == 0:
            return None
        dismissed = _dismissed(rows)
        for row in rows:
            if row.judged or row in dismissed:
                self.state.judged_once.add((row.model, row.deployment.name))
        cold = any((r.model, r.deployment.name) not in self.state.judged_once for r in rows)
        leader = rows[0]
        pool = []
        for row in rows:
            seen = row.scored.prediction.attempts + row.in_flight
            if row.scored.violations or row in dismissed or seen >= REVISIT_SAMPLES * policy.min_samples:
                continue
            if seen < policy.min_samples:
                # A slow start: no more attempts in flight than answers back, so a burst of traffic does
                # not pour into a provider before its first answers can show it is hopeless.
                if row.in_flight < max(1, row.scored.prediction.attempts):
                    pool.append(row)
            elif not cold and row is not leader and leader.judged:
                if row.judged and row.scored.score <= leader.scored.score + policy.explore_margin:
                    pool.append(row)
        if not pool:
            return None
        if not cold and any(r.judged for r in rows) and self.rng.random() >= policy.explore_share:
            return None
        pending = [r for r in pool if r.scored.prediction.attempts + r.in_flight < policy.min_samples]
        if cold and not pending:
            return None
        return min(pending or pool, key=lambda r: (r.scored.prediction.attempts + r.in_flight, self.rng.random()))

    def attempt_started(self, candidate: Candidate) -> bool:
        provider = candidate.provider
        if self.state.provider_in_flight.get(provider.name, 0) >= provider.max_concurrency:
            return False
        key = (candidate.model, candidate.name)
        if not self.state.health.admit(key, self.clock(), self._circuit_changed):
            return False
        self.state.started(provider.name, key)
        return True

    def attempt_finished(self, candidate: Candidate, sample: Sample, retry_after_s: float | None = None) -> None:
        key = (candidate.model, candidate.name)
        self.state.finished(candidate.provider.name, key)
        if sample.outcome == "ok":
            answer = Answer(self.clock(), sample.ttft_s, sample.tokens_per_s, sample.e2e_s)
            self.state.remember(key, answer)
        model = self.config.model(candidate.model)
        if model is None:
            return
        policy = self.config.policy_for(model)
        self.state.health.record(
            key,
            sample.outcome,
            retry_after_s,
            policy,
            self.clock(),
            self._circuit_changed,
            rate_limited=sample.status == 429,
        )

    def try_hedge(self, plan: RoutePlan) -> bool:
        return bool(plan.candidates) and self.state.hedges.take(plan.candidates[0].model)

    def in_flight(self, model: str, deployment: str) -> int:
        return self.state.deployment_in_flight.get((model, deployment), 0)

    def provider_in_flight(self, provider: str) -> int:
        return self.state.provider_in_flight.get(provider, 0)

    def _circuit_changed(self, key: DeploymentKey, state: CircuitState) -> None:
        model, deployment = key
        self.events.circuit_changed(model, deployment, self._provider_of.get(key, deployment), state)


def _dismissed(rows: Sequence[Ranked]) -> list[Ranked]:
    """Deployments not worth measuring further: even their fastest answers lose clearly to another's expected time."""
    expected = [r.scored.prediction.time_s for r in rows if not r.scored.prediction.prior]
    reference = min((t for t in expected if t is not None), default=None)
    if reference is None:
        return []
    return [
        r
        for r in rows
        if r.scored.prediction.attempts >= DISMISS_AFTER
        and r.scored.prediction.best_time_s is not None
        and r.scored.prediction.best_time_s > DISMISS_FACTOR * reference
    ]


def _matches(deployment: DeploymentConfig, names: Sequence[str]) -> bool:
    return deployment.name.lower() in names or deployment.provider.lower() in names


def _filter(
    model: ModelConfig, preferences: ProviderPreferences, providers: dict[str, ProviderConfig]
) -> list[DeploymentConfig]:
    """The deployments a request allows; a filter that leaves none is the request's mistake (400)."""
    deployments = list(model.deployments)
    known = {p.lower() for p in providers} | {d.name.lower() for d in deployments}
    for field, names in (
        ("order", preferences.order),
        ("only", preferences.only or ()),
        ("ignore", preferences.ignore),
    ):
        for index, name in enumerate(names):
            if name not in known:
                raise InvalidRequest(
                    f"'provider.{field}[{index}]': unknown provider \"{name}\" (known: {', '.join(sorted(known))})",
                    param=f"provider.{field}",
                )
    served = ", ".join(d.name for d in deployments)
    if preferences.only is not None:
        deployments = [d for d in deployments if _matches(d, preferences.only)]
        if not deployments:
            raise InvalidRequest(
                f"'provider.only' leaves no deployment of model '{model.name}' (deployments: {served})",
                param="provider.only",
            )
    if preferences.ignore:
        deployments = [d for d in deployments if not _matches(d, preferences.ignore)]
        if not deployments:
            raise InvalidRequest(
                f"'provider.ignore' leaves no deployment of model '{model.name}' (deployments: {served})",
                param="provider.ignore",
            )
    max_in, max_out = preferences.max_price_in, preferences.max_price_out
    if max_in is not None or max_out is not None:
        within = [
            d
            for d in deployments
            if (max_in is None or d.price_in <= max_in) and (max_out is None or d.price_out <= max_out)
        ]
        if not within:
            cheapest = min(deployments, key=lambda d: (d.price_in, d.price_out))
            raise InvalidRequest(
                f"no deployment of model '{model.name}' is within 'provider.max_price' "
                f"(cheapest: {cheapest.name} at {cheapest.price_in:g}/{cheapest.price_out:g} USD per 1M tokens)",
                param="provider.max_price",
            )
        deployments = within
    return deployments


def _spread_near_equal(rows: list[Ranked], band: float, rng: random.Random | None) -> list[Ranked]:
    """Among the leaders within ``band`` of the best score, fewer requests in flight go first."""
    if len(rows) < 2 or rows[0].scored.violations or not rows[0].known:
        return rows
    best = rows[0].scored.score
    # The leading run only: under a price-led sort an unmeasured row can sit between measured
    # ones, and the leaders must stay a prefix so that ``rest`` is every other row exactly once.
    head = list(
        itertools.takewhile(lambda r: not r.scored.violations and r.known and r.scored.score <= best + band, rows)
    )
    if len(head) < 2:
        return rows
    rest = rows[len(head) :]
    if rng is None:
        head.sort(key=lambda r: r.in_flight)  # stable: score order breaks the remaining ties
    else:
        keyed = [(r.in_flight, rng.random(), i) for i, r in enumerate(head)]
        head = [head[k[2]] for k in sorted(keyed)]
    return head + rest


def _listed(rows: Sequence[Ranked], order: Sequence[str]) -> list[Ranked]:
    listed = []
    for name in order:
        for row in rows:
            if _matches(row.deployment, (name,)) and row not in listed:
                listed.append(row)
    return listed


def _apply_order(rows: list[Ranked], preferences: ProviderPreferences) -> list[Ranked]:
    listed = _listed(rows, preferences.order)
    return listed + [r for r in rows if r not in listed]


def _hedge_after(policy: PolicyConfig, snapshot: StatsSnapshot, model: str, row: Ranked) -> float | None:
    """When to hedge this candidate: a fixed delay, or its own TTFT quantile once it is judged."""
    if policy.hedge_after_s is not None:
        return policy.hedge_after_s
    if policy.hedge_quantile is None:
        return None
    summary = snapshot.get(model, row.deployment.name)
    if summary is None or summary.count("ttft_s") < max(1, policy.min_samples):
        return None
    value = summary.quantile("ttft_s", policy.hedge_quantile)
    return None if value is None else max(value, policy.hedge_min_after_s)


def _no_capacity(model: str, rows: Sequence[Ranked]) -> GatewayError:
    """Fail fast: 429 when every deployment asked to wait (Retry-After), else 503."""
    parts = []
    for row in rows:
        if row.circuit == "open":
            why = "rate limited" if row.rate_limited else "circuit open"
            parts.append(f"{row.deployment.name}: {why}, retry in {row.retry_in_s:.1f}s")
        else:
            parts.append(f"{row.deployment.name}: provider at max_concurrency ({row.provider.max_concurrency})")
    waits = [r.retry_in_s for r in rows if r.circuit == "open"]
    headers = {"retry-after": str(max(1, math.ceil(min(waits))))} if len(waits) == len(rows) and waits else {}
    message = f"no deployment of model '{model}' can take a request now ({'; '.join(parts)})"
    if rows and all(r.rate_limited for r in rows):
        return RateLimited(message, code="upstream_rate_limited", headers=headers)
    return NoCapacity(message, headers=headers)
