"""The Student-t's tail (``gateway.routing.student``): the finite sum read on every plan is the incomplete beta's."""

from __future__ import annotations

import random

from gateway.routing import student


def test_the_tails_finite_sum_is_the_incomplete_beta() -> None:
    # Every bound a plan reads (a race lost, an attempt overdue, a stream running slow) goes through this tail; for
    # an even number of degrees of freedom it is a few multiplications, and the same number as the continued
    # fraction's to its own precision, near the level and far in either tail.
    rng = random.Random(5)
    nu = student.TAIL_NU
    for _ in range(20_000):
        x = rng.gauss(0.0, 2.0) if rng.random() < 0.5 else rng.uniform(-40.0, 40.0)
        half = 0.5 * student._beta_inc(nu / 2, 0.5, nu / (nu + x * x))
        exact = half if x >= 0 else 1.0 - half
        assert abs(student._t_tail(x) - exact) <= 1e-9 * exact, x
    assert student._t_tail(0.0) == 0.5
