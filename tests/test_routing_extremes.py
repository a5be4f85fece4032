"""``extremes``, ``within`` and ``reach`` answer what the builtins answered in the change tests, to the bit.

The change tests (``gateway.routing.estimates``) asked ``max(shifts) < z and min(shifts) > -z`` and
``max(max(a), -min(a))``; the one-pass loop must give the same value for every list, NaNs, infinities and signed
zeros included (a NaN first is what ``max`` keeps, a NaN later what it passes over), compiled or not. And
``_surprising``, which reads each metric's first shift without building a dict of them, gives the former verdict.
"""

from __future__ import annotations

import math
import random

from gateway.routing.estimates import (
    CHANGE_MIN_Z,
    LEAP_METRICS,
    SURPRISE_JOINT_Z,
    SURPRISE_Z,
    VIEW_METRICS,
    ViewMetric,
    _surprising,
)
from gateway.routing.extremes import extremes, reach, within

_ODD = [math.nan, math.inf, -math.inf, 0.0, -0.0, CHANGE_MIN_Z, -CHANGE_MIN_Z, 1e-300, -1e-300]


def _same(a: float, b: float) -> bool:
    """Equal as bits: NaN to NaN, and 0.0 told from -0.0."""
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


def _lists(seed: int, count: int) -> list[list[float]]:
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        size = rng.randint(1, 13)
        values = [rng.gauss(0.0, rng.choice((0.5, 1.5, 4.0))) for _ in range(size)]
        for _ in range(rng.choice((0, 0, 1, 2))):
            values[rng.randrange(size)] = rng.choice(_ODD)
        made.append(values)
    return made


def test_extremes_are_the_builtins_max_and_min() -> None:
    for values in _lists(1, 20_000):
        high, low = extremes(values)
        assert _same(high, max(values)), values
        assert _same(low, min(values)), values


def test_within_and_reach_are_the_former_expressions() -> None:
    for values in _lists(2, 20_000):
        for bound in (CHANGE_MIN_Z, 1.0, 0.0):
            assert within(values, bound) == (max(values) < bound and min(values) > -bound), values
        assert _same(reach(values), max(max(values), -min(values))), values


def test_a_nan_first_is_kept_and_a_nan_later_passed_over() -> None:
    assert math.isnan(extremes([math.nan, 3.0, -3.0])[0])
    assert extremes([1.0, math.nan, 3.0, -3.0]) == (3.0, -3.0)
    assert within([1.0, math.nan], CHANGE_MIN_Z)
    assert not within([math.nan, 1.0], CHANGE_MIN_Z)  # max is NaN: not below the bound
    assert _same(reach([-0.0]), max(-0.0, 0.0))
    assert _same(reach([0.0]), 0.0)


def _former_surprising(tests: dict[ViewMetric, list[float]]) -> bool:
    alone = {metric: shifts[0] for metric, shifts in tests.items() if shifts}
    if any(shift <= -SURPRISE_Z for shift in alone.values()):
        return True
    first, stream = (alone.get(m) for m in LEAP_METRICS)
    return first is not None and stream is not None and (first + stream) / math.sqrt(2) <= -SURPRISE_JOINT_Z


def test_surprising_is_the_former_code() -> None:
    """``_surprising`` reads the first shifts without a dict of them: the same verdict for every test set."""
    rng = random.Random(3)
    lists = _lists(4, 6_000)
    for values in lists:
        tests: dict[ViewMetric, list[float]] = {}
        for metric in VIEW_METRICS:
            roll = rng.random()
            if roll < 0.2:
                tests[metric] = []
            elif roll < 0.7:
                tests[metric] = [value * 0.8 for value in values]
        assert _surprising(tests) == _former_surprising(tests), tests
