"""The Student-t's tail (``gateway.routing.student``): the finite sum read on every plan is the incomplete beta's."""

from __future__ import annotations

import math
import random

from gateway.routing import student


def _beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (Lentz): the reference tail."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _beta_inc(b, a, 1.0 - x)
    tiny = 1e-30
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 100):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-10:
            break
    return front * result / a


def test_the_tails_finite_sum_is_the_incomplete_beta() -> None:
    # Every bound a plan reads (a race lost, an attempt overdue, a stream running slow) goes through this tail; for
    # an even number of degrees of freedom it is a few multiplications, and the same number as the continued
    # fraction's to its own precision, near the level and far in either tail.
    rng = random.Random(5)
    nu = student.TAIL_NU
    for _ in range(20_000):
        x = rng.gauss(0.0, 2.0) if rng.random() < 0.5 else rng.uniform(-40.0, 40.0)
        half = 0.5 * _beta_inc(nu / 2, 0.5, nu / (nu + x * x))
        exact = half if x >= 0 else 1.0 - half
        assert abs(student._t_tail(x) - exact) <= 1e-9 * exact, x
    assert student._t_tail(0.0) == 0.5
