"""The plan's shortcuts give what the code they replace gave, bit for bit (the former code copied here).

The whole plan is checked by ``benchmarks/plan_hash.py`` (every plan of simulated markets, before and after a change);
these pin each shortcut on its own, over random and edge values.
"""

from __future__ import annotations

import dataclasses
import math
import random

from gateway.config import StatsConfig
from gateway.policies import PolicyConfig
from gateway.routing import RouteRequest
from gateway.routing.estimates import DRIFT_SIGMA, Estimate
from gateway.routing.explore import RequestSizes
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.predict import EFFECTIVE, CacheTerms, PooledHistograms, _metric, predict
from gateway.routing.router import MeasuredRouter
from gateway.routing.score import Weights
from gateway.routing.scored import MAX_UNCERTAINTY, RequestShape
from gateway.samples import OUTCOMES, Sample
from gateway.stats import InMemoryStatsStore
from gateway.stats.snapshot import NEUTRAL_OUTCOMES, DeploymentSummary
from tests.support.clock import FakeClock
from tests.support.config import routing_config
from tests.support.samples import sample


def _former_uncertainty(e: Estimate, now: float, half_life_s: float, extra: float) -> float:
    sampling = min(MAX_UNCERTAINTY, e.sigma / math.sqrt(e.samples + extra))
    age = max(0.0, now - e.newest_at)
    drift = DRIFT_SIGMA**2 * (2.0 ** (age / half_life_s) - 1.0) if half_life_s > 0 else 0.0
    return min(MAX_UNCERTAINTY, math.sqrt(sampling**2 + min(drift, MAX_UNCERTAINTY**2)))


def _former_sampling(e: Estimate, extra: float) -> float:
    return min(MAX_UNCERTAINTY, e.sigma / math.sqrt(e.samples + extra))


def test_errors_are_uncertainty_and_sampling() -> None:
    rng = random.Random(5)
    for _ in range(20_000):
        e = Estimate(
            mean=rng.lognormvariate(0, 2),
            sigma=rng.choice([0.05, 0.3, rng.uniform(0.01, 3.0)]),
            samples=rng.choice([1.0, 0.5, rng.uniform(0.01, 200.0)]),
            newest_at=rng.uniform(0, 100),
        )
        now = e.newest_at + rng.choice([0.0, -1.0, rng.expovariate(0.1), rng.uniform(0, 400)])
        half_life = rng.choice([0.0, 5.0, rng.uniform(0.5, 30.0)])  # 2 ** (400 / 0.5) still a float
        extra = rng.choice([0.0, 64.0, rng.uniform(0, 64)])
        uncertainty, sampling = e.errors(now, half_life, extra)
        assert uncertainty == _former_uncertainty(e, now, half_life, extra)
        assert sampling == _former_sampling(e, extra)
        assert e.uncertainty(now, half_life, extra) == uncertainty
        assert e.sampling(extra) == sampling


def test_attempts_leave_out_the_neutral_outcomes() -> None:
    rng = random.Random(3)
    for _ in range(2_000):
        summary = DeploymentSummary("m", "d")
        for outcome in rng.sample(OUTCOMES, rng.randint(0, len(OUTCOMES))):
            summary.outcomes[outcome] = rng.randint(1, 10_000)
        assert summary.attempts == sum(n for o, n in summary.outcomes.items() if o not in NEUTRAL_OUTCOMES)


def test_weights_kept_per_policy_object() -> None:
    base = PolicyConfig("p")
    policies = [base, dataclasses.replace(base, time_weight=2.0), dataclasses.replace(base, price_weight=3.0), base]
    for policy in policies:
        for sort in (None, "price", "throughput", "latency"):
            assert Weights.of(policy, sort) == Weights._of(policy, sort)
            assert Weights.of(policy, sort) is Weights.of(policy, sort)
    # An equal policy that is another object gets its own entry, with the same weights.
    twin = dataclasses.replace(base)
    assert twin is not base and Weights.of(twin) == Weights.of(base)


def test_steers_as_before() -> None:
    assert not NO_PREFERENCES.steers
    assert not ProviderPreferences().steers  # equal to the default, another object
    assert ProviderPreferences(sort="price").steers and ProviderPreferences(order=("a",)).steers


def test_a_warm_first_token_and_a_prefill_speed_where_known_and_the_models_where_not() -> None:
    # "a": cached answers heard by the router (its view and the window); "b": in the window only; "c": nothing (its
    # prefill speed is the model's pooled one, its warm first token unknown). Predicted in either order, each
    # reads what ``_metric`` finds for it.
    config = routing_config([("a", 1.0, 2.0), ("b", 1.0, 2.0), ("c", 1.0, 2.0)])
    clock = FakeClock()
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=1), wall_clock=clock)
    router = MeasuredRouter(config, store, rng=random.Random(7), clock=clock)
    model = config.models[0]
    request = RouteRequest(model=model, endpoint="chat", stream=True, prompt_tokens=100, max_tokens=None)
    for answer in [_cached("a", 1.1, 20_000, 0), _cached("a", 0.35, 40_000, 35_000)] * 6:
        candidate = next(c for c in router.plan(request).candidates if c.name == "a")
        assert router.attempt_started(candidate)
        router.attempt_finished(candidate, answer)
        store.record(_cached("b", 2.0, 30_000, 0))
        store.record(_cached("b", 0.5, 30_000, 29_000))
        clock.now += 0.1
    snapshot, policy, views = store.snapshot(), config.policy_for(model), router.memory.views_of("m")
    shape = RequestShape("chat", 40_000, 20, "request")
    for cache in (EFFECTIVE, CacheTerms("warm", 38_000), CacheTerms("cold")):
        for order in (model.deployments, model.deployments[::-1]):
            pooled: PooledHistograms = {}
            for deployment in order:
                view = views.get(deployment.name)
                p = predict("m", deployment, shape, snapshot, policy, view, clock.now, cache, None, pooled)
                summary = snapshot.get("m", deployment.name)
                warm = _metric(view, summary, snapshot, "m", "warm_ttft_s", policy, clock.now, pooled=False, memo={})
                prefill = _metric(view, summary, snapshot, "m", "prefill_s_per_token", policy, clock.now, memo={})
                assert p.warm_ttft_s == (warm.value if warm is not None else None)
                assert p.prefill_tokens_per_s == (1.0 / prefill.value if prefill is not None else None)
                assert (warm is None) == (deployment.name == "c")
                assert prefill is not None
                fresh = predict("m", deployment, shape, snapshot, policy, view, clock.now, cache, None, {})
                assert repr(p) == repr(fresh)


def _cached(deployment: str, ttft: float, prompt: int, hit: int) -> Sample:
    return dataclasses.replace(sample(deployment, ttft=ttft), usage_prompt_tokens=prompt, usage_cached_tokens=hit)


def test_request_sizes_medians_as_before() -> None:
    rng = random.Random(11)
    sizes = RequestSizes()
    assert sizes.medians() == (math.inf, math.inf)
    for _ in range(300):
        sizes.add(rng.choice([1, 8, 256, rng.randint(1, 4000)]), rng.randint(1, 100_000))
        sizes._medians = None
        outputs = sorted(o for o, _ in sizes.recent)
        prompts = sorted(p for _, p in sizes.recent)
        middle = (len(outputs) - 1) // 2
        assert sizes.medians() == (float(outputs[middle]), float(prompts[middle]))
