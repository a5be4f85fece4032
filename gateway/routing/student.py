"""Reading answers through a Student-t: how well a hypothesis predicted an answer or a bound, and its posterior after.

An answer is the level plus Student-t noise, so a far answer is read as one far answer. A bound ("at least t") is
read through the same t's tail, and moves a hypothesis's normal posterior by that tail's assumed-density step.
"""

from __future__ import annotations

import math
from typing import Final

from gateway.routing.belief_runs import SPT, TTFT, Run

TAIL_NU: Final = 4.0
"""Degrees of freedom of an answer's Student-t noise."""
_T_NORM: Final = math.exp(math.lgamma((TAIL_NU + 1) / 2) - math.lgamma(TAIL_NU / 2)) / math.sqrt(TAIL_NU * math.pi)
_POWER: Final = -(TAIL_NU + 1) / 2
"""The Student-t density's exponent."""
_SQRT2: Final = math.sqrt(2.0)
_SQRT_TAU: Final = math.sqrt(math.tau)
"""``statistics``' own constants, so that the normal's cdf and pdf below are its ``NormalDist()``'s floats."""


def likelihoods(
    runs: list[Run], values: tuple[float | None, ...], bounds: tuple[float | None, ...], noise: list[float]
) -> None:
    """How well each of ``runs`` predicted this evidence (``Run.fit``): Student-t densities of values, Student-t
    tails of bounds, multiplied first token first. Sets each run's squared residuals (``Run.square0``, ``square1``)
    of the values too."""
    residuals(runs, values)
    v0, v1, b0, b1, n0, n1 = values[TTFT], values[SPT], bounds[TTFT], bounds[SPT], noise[TTFT], noise[SPT]
    for run in runs:
        p = 1.0
        if v0 is not None:
            p *= _density(run.square0, run.var0, n0)
        elif b0 is not None:
            p *= _beyond(b0, run.mean0, run.var0, n0)
        if v1 is not None:
            p *= _density(run.square1, run.var1, n1)
        elif b1 is not None:
            p *= _beyond(b1, run.mean1, run.var1, n1)
        run.fit = p


def residuals(runs: list[Run], values: tuple[float | None, ...]) -> None:
    """Set each run's squared residuals of the values (``Run.square0``, ``square1``): ``likelihoods`` does first, and
    the belief for runs it did not weigh."""
    v0, v1 = values[TTFT], values[SPT]
    for run in runs:
        if v0 is not None:
            run.square0 = math.pow(v0 - run.mean0, 2.0)
        if v1 is not None:
            run.square1 = math.pow(v1 - run.mean1, 2.0)


def update_all(
    runs: list[Run], values: tuple[float | None, ...], bounds: tuple[float | None, ...], noise: list[float]
) -> None:
    """Each run's posterior after the evidence: a robust Kalman step per value, the assumed-density step of a
    Student-t tail per bound; the two metrics independently. Reads the runs' squared residuals of the values
    (``likelihoods`` or ``residuals`` set them against the same means)."""
    v0, v1, b0, b1, n0, n1 = values[TTFT], values[SPT], bounds[TTFT], bounds[SPT], noise[TTFT], noise[SPT]
    for run in runs:
        if v0 is not None:
            run.mean0, run.var0 = _kalman(v0, run.square0, run.mean0, run.var0, n0)
        elif b0 is not None:
            run.mean0, run.var0 = _tail_step(b0, run.mean0, run.var0, n0)
        if v1 is not None:
            run.mean1, run.var1 = _kalman(v1, run.square1, run.mean1, run.var1, n1)
        elif b1 is not None:
            run.mean1, run.var1 = _tail_step(b1, run.mean1, run.var1, n1)


def _density(square: float, var: float, n: float) -> float:
    """A value's Student-t density (its ``1/√(2π)``-free kernel) under a level ``N(mean, var)``, noise scale ``n``,
    given its squared residual ``(value − mean)²``."""
    scale2 = var + n
    z2 = square / scale2
    return math.pow(1.0 + z2 / TAIL_NU, _POWER) / math.sqrt(scale2)


def _beyond(bound: float, mean: float, var: float, n: float) -> float:
    """The chance of an answer at least ``bound`` under a level ``N(mean, var)`` and noise ``n``, at least 1e-12
    (NaN too)."""
    tail = _t_tail((bound - mean) / math.sqrt(var + n))
    return tail if tail > 1e-12 else 1e-12


def _kalman(value: float, square: float, mean: float, var: float, n: float) -> tuple[float, float]:
    """A robust Kalman step: a far answer (Student-t) counts for less. The posterior's mean and variance; ``square``
    is ``(value − mean)²``."""
    weight = (TAIL_NU + 1) / (TAIL_NU + square / (var + n))
    gain = var / (var + n / weight)
    return mean + gain * (value - mean), (1 - gain) * var


def _tail_step(bound: float, mean: float, var: float, n: float) -> tuple[float, float]:
    """The assumed-density step of a Student-t tail ("at least ``bound``"): the posterior's mean and variance."""
    s = math.sqrt(var + n)
    alpha = (bound - mean) / s
    tail = _t_tail(alpha)
    hazard = _T_NORM * math.pow(1.0 + alpha * alpha / TAIL_NU, _POWER) / (tail if tail > 1e-12 else 1e-12)
    slope = alpha * (TAIL_NU + 1) / (TAIL_NU + alpha * alpha)  # -d log pdf / d alpha
    shrunk = var * (1.0 - var / (s * s) * hazard * (hazard - slope))
    shrunk = shrunk if shrunk > 1e-6 else 1e-6  # max(1e-6, shrunk), NaN to 1e-6
    return mean + var / s * hazard, shrunk if shrunk < var else var


def censored_square(bound: float, mean: float, variance: float) -> float:
    """E[(y − mean)²] of a normal answer known only to be at least ``bound``: what a bound hides of the spread."""
    alpha = (bound - mean) / math.sqrt(variance)
    # ``NormalDist()``'s cdf and pdf written out, their own expressions at μ = 0.0, σ = 1.0 (``x - 0.0`` is ``x``,
    # ``1.0 * c`` is ``c``): the same floats without two interpreted calls; ``max(1e-12, t)`` as a comparison.
    tail = 1.0 - 0.5 * (1.0 + math.erf(alpha / _SQRT2))
    tail = tail if tail > 1e-12 else 1e-12
    return variance * (1.0 + alpha * (math.exp(alpha * alpha / -2.0) / _SQRT_TAU) / tail)


_EVEN_TERMS = (
    tuple(math.prod((2 * i - 1) / (2 * i) for i in range(1, j + 1)) for j in range(int(TAIL_NU) // 2))
    if TAIL_NU == int(TAIL_NU) and int(TAIL_NU) % 2 == 0
    else ()
)
"""For an even ν the t's CDF is 1/2 + ξ/2 · Σ_j c_j (1 − ξ²)^j with ξ = x / √(ν + x²) and
c_j = Π_{i≤j} (2i − 1) / 2i, j < ν/2: these are the c_j (none for another ν)."""
_NU4: Final = _EVEN_TERMS == (1, 0.5)
"""ν = 4: the sum's two terms written out in ``_t_tail`` (the same operations: ``0.0 + 1 * 1.0`` is ``1.0``, and
``1.0 * rest`` is ``rest``), without iterating a tuple of boxed numbers."""


def _t_tail(x: float) -> float:
    """P(T > x) for a Student-t of ``TAIL_NU`` degrees of freedom: the finite sum for an even ν, else the
    incomplete beta."""
    if _NU4:
        xi = x / math.sqrt(TAIL_NU + x * x)
        return 0.5 - 0.5 * xi * (1.0 + 0.5 * (1.0 - xi * xi))
    if _EVEN_TERMS:
        xi = x / math.sqrt(TAIL_NU + x * x)
        rest, power, total = 1.0 - xi * xi, 1.0, 0.0
        for c in _EVEN_TERMS:
            total += c * power
            power *= rest
        return 0.5 - 0.5 * xi * total
    half = 0.5 * _beta_inc(TAIL_NU / 2, 0.5, TAIL_NU / (TAIL_NU + x * x))
    return half if x >= 0 else 1.0 - half


def _beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (Lentz)."""
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
