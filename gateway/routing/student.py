"""Reading answers through a Student-t: how well a hypothesis predicted an answer or a bound, and its posterior after.

An answer is the level plus Student-t noise, so a far answer is read as one far answer. A bound ("at least t") is
read through the same t's tail, and moves a hypothesis's normal posterior by that tail's assumed-density step.
"""

from __future__ import annotations

import math
from typing import Final

from gateway.routing.belief_runs import SPT, TTFT, Run

TAIL_NU: Final = 4.0
"""Degrees of freedom of an answer's Student-t noise (``_t_tail`` is written for this ν)."""
_T_NORM: Final = math.exp(math.lgamma((TAIL_NU + 1) / 2) - math.lgamma(TAIL_NU / 2)) / math.sqrt(TAIL_NU * math.pi)


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
    return math.pow(1.0 + z2 / TAIL_NU, -(TAIL_NU + 1) / 2) / math.sqrt(scale2)


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
    hazard = _T_NORM * math.pow(1.0 + alpha * alpha / TAIL_NU, -(TAIL_NU + 1) / 2) / (tail if tail > 1e-12 else 1e-12)
    slope = alpha * (TAIL_NU + 1) / (TAIL_NU + alpha * alpha)  # -d log pdf / d alpha
    shrunk = var * (1.0 - var / (s * s) * hazard * (hazard - slope))
    shrunk = shrunk if shrunk > 1e-6 else 1e-6  # max(1e-6, shrunk), NaN to 1e-6
    return mean + var / s * hazard, shrunk if shrunk < var else var


def censored_square(bound: float, mean: float, variance: float) -> float:
    """E[(y − mean)²] of a normal answer known only to be at least ``bound``: what a bound hides of the spread."""
    alpha = (bound - mean) / math.sqrt(variance)
    # ``NormalDist()``'s cdf and pdf written out with ``statistics``' own constants, at μ = 0.0, σ = 1.0: the same
    # floats without two interpreted calls; ``max(1e-12, t)`` as a comparison.
    tail = 1.0 - 0.5 * (1.0 + math.erf(alpha / math.sqrt(2.0)))
    tail = tail if tail > 1e-12 else 1e-12
    return variance * (1.0 + alpha * (math.exp(alpha * alpha / -2.0) / math.sqrt(math.tau)) / tail)


def _t_tail(x: float) -> float:
    """P(T > x) for a Student-t of ``TAIL_NU`` = 4 degrees of freedom: one less its CDF, whose finite sum for ν = 4
    is 1/2 + ξ/2 · (1 + (1 − ξ²)/2) with ξ = x / √(ν + x²)."""
    xi = x / math.sqrt(TAIL_NU + x * x)
    return 0.5 - 0.5 * xi * (1.0 + 0.5 * (1.0 - xi * xi))
