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
    assert math.sqrt(fit.var_slope) > 0.1 * SLOPE  # still unsure along the line the answers cannot tell apart


def test_varied_prompt_sizes_learn_the_slope_and_the_base() -> None:
    rng = random.Random(2)
    fit = Prefill.start(1.0)
    for i in range(20):
        fit = fit.observe(float(i), COLD if i % 2 == 0 else WARM, _answer(rng, COLD if i % 2 == 0 else WARM))
    assert abs(fit.s_per_token - SLOPE_TRUE) < 0.2 * SLOPE_TRUE
    assert abs(fit.base - BASE) < 0.005


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


def _cold_then_warm(rng: random.Random) -> tuple[Belief, float]:
    """The affinity test's deployment: cold prompts (~11k and ~8k uncached tokens, first token ~0.3 s, nearly all
    prefill) before any warm turn, then four warm turns (~340 uncached tokens, ~0.02 s)."""
    belief, now = Belief(), 0.0
    for uncached in (11307, 11307, 8247, 337, 338, 338, 338):
        now += 0.3
        belief.observe(now, NO_PRIOR, _answer(rng, uncached, sigma=0.05), 0.01, uncached_tokens=uncached)
    return belief, now


def test_a_base_read_off_an_unlearned_slope_is_at_most_its_answer() -> None:
    """Cold answers alone cannot split base from prefill; they do say the base is at most the first token. The level
    is left below the answers (from the 1 s it starts at), not at a base the prior's slope made up."""
    rng = random.Random(5)
    belief, now = Belief(), 0.0
    for uncached in (11307, 11307, 8247):
        now += 0.3
        belief.observe(now, NO_PRIOR, _answer(rng, uncached, sigma=0.05), 0.01, uncached_tokens=uncached)
    assert math.exp(belief.level(now, 0)[0]) < 0.1  # the answers ~0.3 s; main's level: 0.157 s


def test_bases_guessed_before_the_slope_is_learned_leave_the_spread_alone_and_a_slowdown_is_a_change() -> None:
    """The warm turns learn the slope and a ~0.01 s base; the cold answers' guessed bases told the level only what
    they knew, so the answers' learned spread is the warm turns' (main's: 2.1, from bases of ~0.16 s), and a 1.5 s
    warm turn then reads as a change to 1.5 s, not as one wild answer."""
    belief, now = _cold_then_warm(random.Random(5))
    assert belief.spread2[0] < 0.3
    assert math.exp(belief.level(now, 0)[0]) < 0.02
    belief.observe(now + 1.6, NO_PRIOR, 1.5, 0.01, uncached_tokens=338)
    top = max(belief.runs, key=lambda r: r.weight)
    assert math.exp(top.mean0) > 1.0  # main's heaviest run: 0.011 s


def test_long_prompts_of_an_unlearned_slope_leave_a_learned_spread_as_it_was() -> None:
    """A level learned from answers of unknown prompts, then long prompts: their bases are guesses of the slope's
    share, and tell the answers' spread only their share of it."""
    rng = random.Random(6)
    belief, now = Belief(), 0.0
    for _ in range(30):
        now += 0.5
        belief.observe(now, NO_PRIOR, 0.2 * math.exp(rng.gauss(0.0, 0.1)), 0.01, uncached_tokens=None)
    before = belief.spread2[0]
    for _ in range(6):
        now += 0.5
        belief.observe(now, NO_PRIOR, _answer(rng, 20000, base=0.2), 0.01, uncached_tokens=20000)
    assert belief.spread2[0] < 1.12 * before


def test_any_prompt_and_first_token_leave_the_belief_finite() -> None:
    """Prompts of 0 to 10⁶ uncached tokens, first tokens of a microsecond to a minute, in any order, after a
    noiseless past or none: the level, its runs and the learned spread stay finite (the base's unsureness and its
    bound, read where they are extreme: a bound far below a level heard as noiseless underflows its chance)."""
    rng = random.Random(7)
    for life in range(20):
        belief, now = Belief(), 0.0
        for _ in range(60 * (life % 2)):  # half the lives: a noiseless second first (its spread learned ~0)
            now += 0.1
            belief.observe(now, NO_PRIOR, 1.0, 0.01, uncached_tokens=0)
        for _ in range(40):
            now += rng.choice((0.0, 0.01, 1.0, 100.0))
            uncached = rng.choice((0, 1, 300, 20_000, 1_000_000))
            ttft = math.exp(rng.uniform(math.log(1e-6), math.log(60.0)))
            belief.observe(now, NO_PRIOR, ttft, rng.choice((None, 0.01)), uncached_tokens=uncached)
            assert all(math.isfinite(r.mean0) and r.var0 > 0.0 for r in belief.runs)
            assert abs(sum(r.weight for r in belief.runs) - 1.0) < 1e-9
            assert math.isfinite(belief.spread2[0]) and math.isfinite(belief.level(now, 0)[0])
