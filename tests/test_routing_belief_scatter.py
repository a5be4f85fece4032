"""The scatter's own change points (``gateway.routing.belief_scatter``) inside the belief: a tail that narrows is
followed, a level that jumps is taken by the level and leaves the scatter where it was."""

from __future__ import annotations

import math
import random

import pytest

from gateway.routing.belief import Belief
from gateway.routing.priors import Prior

NARROW = Prior(noise=(0.3**2, 0.3**2), spread2=(0.3**2, 0.3**2))
"""Siblings whose answers scatter by e^0.3 (where a new scatter starts)."""


def _answers(belief: Belief, rng: random.Random, n: int, now: float, ttft: float, sigma: float, every: float) -> float:
    """``n`` answers of a log-normal first token (median ``ttft``, spread ``sigma``) and a steady speed."""
    for _ in range(n):
        now += every
        belief.observe(now, NARROW, ttft * math.exp(rng.gauss(0.0, sigma)), 1 / 200.0 * math.exp(rng.gauss(0.0, 0.1)))
    return now


@pytest.mark.parametrize("seed", range(4))
def test_a_tail_that_narrows_with_its_median_unchanged_is_followed(seed: int) -> None:
    """A first token of spread e^1.25 for 40 answers, then e^0.3, its median the same, heard every 5 s: within 15
    answers the belief reads it narrow. One scatter learned over ~50 answers still reads it about e^1 wide."""
    belief, rng = Belief(), random.Random(seed)
    now = _answers(belief, rng, 40, 0.0, 0.2, 1.25, 5.0)
    assert belief.spread()[0] > 0.8
    _answers(belief, rng, 15, now, 0.2, 0.3, 5.0)
    assert belief.spread()[0] < 0.7


@pytest.mark.parametrize("seed", range(8))
def test_a_level_that_jumps_is_taken_by_the_level_not_the_scatter(seed: int) -> None:
    """A first token of spread e^0.3 jumps three times slower, its scatter the same: the level's change point takes
    it within six answers, and the scatter is read at most 0.18 wider meanwhile (one scatter: 0.06-0.14 here). The
    far answers are weighed against the level's runs with a change of level among them; weighed against the heaviest
    run alone (as if no change of level could explain them), a wider scatter becomes the likeliest on seed 4 (0.69)."""
    belief, rng = Belief(), random.Random(seed)
    now = _answers(belief, rng, 80, 0.0, 0.2, 0.3, 0.5)
    before = belief.spread()[0]
    widest = before
    for _ in range(6):
        now = _answers(belief, rng, 1, now + 2.0, 0.6, 0.3, 0.5)
        widest = max(widest, belief.spread()[0])
    assert belief.expected(now).ttft_s > 0.45
    assert widest < before + 0.18
