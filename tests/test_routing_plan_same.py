"""The plan's shortcuts give what the code they replace gave, bit for bit (the former code copied here).

The whole plan is checked by ``benchmarks/plan_hash.py`` (every plan of simulated markets, before and after a change);
these pin each shortcut on its own, over random and edge values.
"""

from __future__ import annotations

import dataclasses
import math
import random

from gateway.policies import PolicyConfig
from gateway.routing.estimates import DRIFT_SIGMA, MAX_UNCERTAINTY, Estimate
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.score import Weights
from gateway.samples import OUTCOMES
from gateway.stats.snapshot import NEUTRAL_OUTCOMES, DeploymentSummary


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
