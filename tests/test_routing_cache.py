"""The prompt cache in predictions: warm where the session is bound, cold (whole-prompt prefill) elsewhere."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.routing.predict import CacheTerms, RequestShape, predict
from gateway.samples import Sample
from gateway.stats import StatsSnapshot
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
