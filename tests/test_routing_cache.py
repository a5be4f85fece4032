"""The prompt cache in predictions: warm where the session is bound, cold (whole-prompt prefill) elsewhere."""

from __future__ import annotations

import dataclasses
import random

import pytest

from gateway.config import ModelConfig, StatsConfig
from gateway.routing import RouteRequest
from gateway.routing.affinity import cache_terms
from gateway.routing.overrides import NO_PREFERENCES
from gateway.routing.plan import SessionRoute
from gateway.routing.predict import CacheTerms, predict
from gateway.routing.router import MeasuredRouter
from gateway.routing.scored import RequestShape
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore, StatsSnapshot
from tests.support.clock import FakeClock
from tests.support.config import routing_config
from tests.support.samples import sample

CONFIG = routing_config([("a", 1.0, 2.0), ("b", 1.0, 2.0)])
SHAPE = RequestShape("chat", 40_000, 20, "request")


def cached(deployment: str, ttft: float, prompt: int, hit: int) -> Sample:
    return dataclasses.replace(sample(deployment, ttft=ttft), usage_prompt_tokens=prompt, usage_cached_tokens=hit)


def test_warm_is_the_warm_first_token_and_the_cached_price_cold_is_the_prompt_at_the_prefill_speed() -> None:
    # "a": cold answers of 20k uncached tokens in 1 s (20k tokens/s), warm ones in 0.1 s.
    samples = [cached("a", 1.0, 20_000, 0) for _ in range(5)] + [cached("a", 0.1, 20_000, 19_000) for _ in range(5)]
    snapshot = StatsSnapshot.from_samples(samples)
    model = CONFIG.models[0]
    deployment = dataclasses.replace(model.deployments[0], price_cached_in=0.1)
    policy = CONFIG.policy_for(model)
    warm = predict("m", deployment, SHAPE, snapshot, policy, cache=CacheTerms("warm", 38_000))
    cold = predict("m", deployment, SHAPE, snapshot, policy, cache=CacheTerms("cold"))
    effective = predict("m", deployment, SHAPE, snapshot, policy)
    assert warm.ttft_s == pytest.approx(0.1, rel=0.02)
    assert cold.ttft_s == pytest.approx(40_000 / 20_000, rel=0.03)
    assert warm.cost_usd == pytest.approx((2_000 * 1.0 + 38_000 * 0.1 + 20 * 2.0) / 1e6)
    assert cold.cost_usd == pytest.approx((40_000 * 1.0 + 20 * 2.0) / 1e6)
    # Without a session: the usual first token, priced by the observed hit ratio (19k of 40k prompt tokens).
    assert effective.hit_ratio == pytest.approx(19 / 40, rel=0.02)
    assert effective.cost_usd < cold.cost_usd and effective.cached_tokens == pytest.approx(40_000 * 19 / 40, rel=0.02)
    assert (warm.cache, cold.cache, effective.cache) == ("warm", "cold", "effective")


def test_a_deployment_never_seen_warm_has_no_warm_estimate_and_no_hit_ratio_without_reports() -> None:
    snapshot = StatsSnapshot.from_samples([sample("b", ttft=0.3) for _ in range(5)])
    model = CONFIG.models[0]
    warm = predict("m", model.deployments[1], SHAPE, snapshot, CONFIG.policy_for(model), cache=CacheTerms("warm"))
    assert warm.warm_ttft_s is None and warm.ttft_s == pytest.approx(0.3, rel=0.02)
    assert warm.hit_ratio is None


def test_the_prefill_speed_is_measured_on_cold_answers_only() -> None:
    # Cold answers prefill 20k tokens in 1 s; warm ones prefill their last 3k tokens in 0.25 s, mostly base
    # latency: counted, they would read as a 12k tokens/s prefill and predict a 40k-token prompt 40% too slow.
    samples = [cached("a", 1.0, 20_000, 0) for _ in range(5)] + [cached("a", 0.25, 40_000, 37_000) for _ in range(5)]
    snapshot = StatsSnapshot.from_samples(samples)
    model = CONFIG.models[0]
    cold = predict("m", model.deployments[0], SHAPE, snapshot, CONFIG.policy_for(model), cache=CacheTerms("cold"))
    assert cold.prefill_tokens_per_s == pytest.approx(20_000, rel=0.03)
    assert cold.ttft_s == pytest.approx(2.0, rel=0.03)


def test_a_named_session_bound_nowhere_is_cold_everywhere_one_whose_binding_is_unknown_is_priced_by_hit_ratio() -> None:
    deployments = CONFIG.models[0].deployments
    unbound = SessionRoute("k", "header", "auto", "unbound")
    assert cache_terms(unbound, deployments, NO_PREFERENCES) == {d.name: CacheTerms("cold") for d in deployments}
    bound = SessionRoute("k", "header", "auto", "bound", "b", 30_000)
    assert cache_terms(bound, deployments, NO_PREFERENCES) == {"a": CacheTerms("cold"), "b": CacheTerms("warm", 30_000)}
    unknown = SessionRoute("k", "header", "auto", "unavailable")
    assert cache_terms(unknown, deployments, NO_PREFERENCES) is None
    assert cache_terms(dataclasses.replace(unbound, affinity="off"), deployments, NO_PREFERENCES) is None
    # A long prompt seen for the first time may be a one-off request: routed as traffic without a session.
    assert cache_terms(dataclasses.replace(unbound, source="fingerprint"), deployments, NO_PREFERENCES) is None


def test_the_routers_view_keeps_the_prefill_speed_of_long_cold_answers_past_the_base_latency() -> None:
    # Base 0.1 s (warm answers), prefill 20k tokens/s. A long cold answer (20k tokens in 1.1 s) measures
    # 20k tokens/s past the base; a short one (2k tokens in 0.19 s: base + noise) would read as 22k, or, a
    # little noise lower, as several times that: it is not counted.
    clock = FakeClock()
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=1), wall_clock=clock)
    router = MeasuredRouter(CONFIG, store, rng=random.Random(7), clock=clock)
    model = CONFIG.models[0]
    answers = [cached("a", 0.1, 20_000, 19_000)] * 3 + [cached("a", 1.1, 20_000, 0)] * 3
    answers += [cached("a", 0.12, 2_000, 0)] * 3
    for answer in answers:
        candidate = next(c for c in router.plan(route(model)).candidates if c.name == "a")
        assert router.attempt_started(candidate)
        router.attempt_finished(candidate, answer)
        clock.now += 0.1
    view = router.memory.views_of("m")["a"]
    estimate = view.estimate("prefill_s_per_token")
    assert estimate is not None and 1.0 / estimate.mean == pytest.approx(20_000, rel=0.03)


def route(model: ModelConfig) -> RouteRequest:
    return RouteRequest(model=model, endpoint="chat", stream=True, prompt_tokens=100, max_tokens=None)


def test_a_warm_turn_is_predicted_at_the_base_plus_the_prefill_of_what_the_previous_turn_did_not_send() -> None:
    # Base 0.1 s, prefill 20k tokens/s: cold answers of 20k tokens take 1.1 s, warm turns that add 5k 0.35 s.
    clock = FakeClock()
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=1), wall_clock=clock)
    router = MeasuredRouter(CONFIG, store, rng=random.Random(7), clock=clock)
    model = CONFIG.models[0]
    for answer in [cached("a", 1.1, 20_000, 0), cached("a", 0.35, 40_000, 35_000)] * 12:
        candidate = next(c for c in router.plan(route(model)).candidates if c.name == "a")
        assert router.attempt_started(candidate)
        router.attempt_finished(candidate, answer)
        clock.now += 0.1
    view, snapshot, policy = router.memory.views_of("m")["a"], store.snapshot(), CONFIG.policy_for(model)
    deployment = model.deployments[0]

    def first_token(cache: CacheTerms) -> float | None:
        return predict("m", deployment, SHAPE, snapshot, policy, view, clock.now, cache).ttft_s

    assert first_token(CacheTerms("warm", 38_000)) == pytest.approx(0.1 + 2_000 / 20_000, rel=0.05)
    # The next turn pasted a 28k-token file: it is not the usual warm turn.
    assert first_token(CacheTerms("warm", 12_000)) == pytest.approx(0.1 + 28_000 / 20_000, rel=0.05)
    assert first_token(CacheTerms("cold")) == pytest.approx(0.1 + 40_000 / 20_000, rel=0.05)
