"""The belief's prefill regression: first token = base + uncached prompt tokens × seconds per token."""

from __future__ import annotations

import math
import random

from gateway.routing.belief import NO_PRIOR, Belief
from gateway.routing.belief_prefill import SLOPE, Prefill

BASE, SLOPE_TRUE = 0.01, 25e-6
"""The fake provider of the affinity tests: 10 ms base, prefill at 40k tokens/s."""
COLD, WARM = 6000, 300


def _answer(rng: random.Random, uncached: int, base: float = BASE, sigma: float = 0.1) -> float:
    return (base + SLOPE_TRUE * uncached) * math.exp(rng.gauss(0.0, sigma))


def test_one_prompt_size_leaves_the_split_to_the_prior_instead_of_zeroing_the_slope() -> None:
    rng = random.Random(1)
    fit = Prefill.start(1.0)
    for i in range(20):
        fit = fit.observe(float(i), COLD, _answer(rng, COLD))
    # Only base + 6000 × slope is known (≈ 0.16 s): the slope stays of the prior's order, not ~0.
    assert 0.1 * SLOPE_TRUE < fit.s_per_token < 2 * SLOPE
    assert abs(fit.base + COLD * fit.slope - (BASE + COLD * SLOPE_TRUE)) < 0.03
    assert fit.sd_slope() > 0.1 * SLOPE  # still unsure along the line the answers cannot tell apart


def test_varied_prompt_sizes_learn_the_slope_and_the_base() -> None:
    rng = random.Random(2)
    fit = Prefill.start(1.0)
    for i in range(20):
        fit = fit.observe(float(i), COLD if i % 2 == 0 else WARM, _answer(rng, COLD if i % 2 == 0 else WARM))
    assert abs(fit.s_per_token - SLOPE_TRUE) < 0.2 * SLOPE_TRUE
    assert abs(fit.base - BASE) < 0.005
    assert fit.prefill_s(COLD) == fit.s_per_token * COLD


def test_a_belief_predicts_a_warm_turn_quicker_than_a_cold_prompt() -> None:
    """Two cold answers and two warm turns (the affinity tests' warm-up and first turns): the level is the base, and
    a cold prompt's first token is the base plus its prefill."""
    rng = random.Random(3)
    belief = Belief()
    now = 0.0
    for uncached in (COLD, COLD, COLD, WARM, WARM):
        now += 1.0
        belief.observe(now, NO_PRIOR, _answer(rng, uncached), 0.01, uncached_tokens=uncached)
    base = belief.expected(now).ttft_s
    cold = base + belief.prefill_s() * COLD
    warm = base + belief.prefill_s() * WARM
    assert 0.5 * SLOPE_TRUE < belief.prefill_s() < 1.5 * SLOPE_TRUE
    assert base < 0.03
    assert 0.1 < cold < 0.25
    assert cold > 4 * warm


def test_one_slow_warm_answer_moves_the_level_not_the_slope() -> None:
    rng = random.Random(4)
    fit = Prefill.start(1.0)
    for i in range(20):
        fit = fit.observe(float(i), COLD if i % 2 == 0 else WARM, _answer(rng, COLD if i % 2 == 0 else WARM))
    slowed = fit.observe(21.0, WARM, 1.5)
    assert abs(slowed.s_per_token - fit.s_per_token) < 0.2 * SLOPE_TRUE


def test_an_answer_of_unknown_prompt_leaves_the_regression_alone() -> None:
    belief = Belief()
    belief.observe(1.0, NO_PRIOR, 0.2, 0.01, uncached_tokens=None)
    assert belief.prefill is None and belief.prefill_s() == SLOPE
