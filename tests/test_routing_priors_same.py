"""``priors.pooled`` (the sums as plain loops, each sibling read once) against ``pooled`` as it was."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from gateway.routing.priors import (
    BETWEEN,
    PRIOR_WEIGHT,
    SPREAD,
    Prior,
    pooled,
)
from tests.test_routing_pool import Heard


def _on_price(
    x: Sequence[float], levels: Sequence[float], mean: float, between: float, at: float
) -> tuple[float, float, float]:
    """``priors._on_price`` as it was (main ``b67f607``), word for word: the reference's price regression."""
    k = len(x)
    centre = sum(x) / k
    sxx = sum(math.pow(xi - centre, 2.0) for xi in x)
    sxy = sum((xi - centre) * (y - mean) for xi, y in zip(x, levels, strict=True))
    slope = sxy / (sxx + between / BETWEEN**2)
    residuals = sum(math.pow(y - mean - slope * (xi - centre), 2.0) for xi, y in zip(x, levels, strict=True))
    unexplained = (PRIOR_WEIGHT * BETWEEN**2 + residuals) / (PRIOR_WEIGHT + k)
    slope_var = unexplained / (sxx + unexplained / BETWEEN**2)
    return slope * (at - centre), unexplained, slope_var * math.pow(at - centre, 2.0)


def _reference(others: Sequence[Heard], now: float, price: float | None, prices: Sequence[float | None]) -> Prior:
    """``pooled`` before the loops were written out (main ``b67f607``), word for word."""
    means: list[float | None] = []
    variances: list[float] = []
    centres: list[float | None] = [None, None]
    centre_vars = [BETWEEN**2, BETWEEN**2]
    measured = [i for i, b in enumerate(others) if b.answers]
    priced = price is not None and price > 0 and all(i < len(prices) and (prices[i] or 0) > 0 for i in measured)
    x = [math.log(prices[i] or 1.0) for i in measured] if priced else []
    for metric in (0, 1):
        levels = [others[i].level(now, metric)[0] for i in measured]
        if not levels:
            means.append(None)
            variances.append(BETWEEN**2)
            continue
        k = len(levels)
        mean = sum(levels) / k
        between = (PRIOR_WEIGHT * BETWEEN**2 + sum(math.pow(y - mean, 2.0) for y in levels)) / (PRIOR_WEIGHT + k)
        if priced and price is not None:
            plain = between * (1 + 1 / k)
            moved, between, far = _on_price(x, levels, mean, between, math.log(price))
            if moved or far:
                centres[metric], centre_vars[metric] = mean, plain
            means.append(mean + moved)
            variances.append(between * (1 + 1 / k) + far)
            continue
        means.append(mean)
        variances.append(between * (1 + 1 / k))
    base, count = PRIOR_WEIGHT * SPREAD**2, PRIOR_WEIGHT + len(measured)
    noise = tuple((base + sum(others[i].noise[m] for i in measured)) / count for m in (0, 1))
    spread2 = tuple((base + sum(others[i].spread2[m] for i in measured)) / count for m in (0, 1))
    return Prior(
        (means[0], means[1]),
        (variances[0], variances[1]),
        (noise[0], noise[1]),
        (spread2[0], spread2[1]),
        (centres[0], centres[1]),
        (centre_vars[0], centre_vars[1]),
    )


def _heard(rng: random.Random) -> Heard:
    answers = rng.choice((0, 1, 3, 40))
    levels = ((rng.gauss(-1.0, 1.5), rng.random()), (rng.gauss(-4.0, 1.5), rng.random()))
    return Heard(answers, [rng.random() * 0.5, rng.random() * 0.5], [rng.random() * 0.5, rng.random() * 0.5], levels)


def test_the_priors_pooled_as_loops_are_the_same_floats_as_before() -> None:
    """400 sets of one to nine siblings (some never heard, some with a price missing), priced and not: every field of
    the prior equal to the former ``pooled``'s, to the last bit (``Prior`` compares its floats exactly)."""
    rng = random.Random(7)
    for _ in range(400):
        others = [_heard(rng) for _ in range(rng.randint(1, 9))]
        prices = [rng.choice((None, 0.0, rng.uniform(0.1, 30.0), rng.uniform(0.1, 30.0))) for _ in others]
        for price in (None, rng.uniform(0.1, 30.0)):
            expected = _reference(others, 5.0, price, prices)
            assert pooled(others, 5.0, price, prices) == expected
