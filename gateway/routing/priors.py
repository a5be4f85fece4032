"""Where a belief starts: a prior pooled from the model's other deployments.

A model's deployments are believed to lie around a common level (a hierarchical normal): a deployment
never heard from borrows the others' mean, as uncertain as they lie apart (``BETWEEN`` until they are
measured). Every replica's answers are evidence like this replica's own, heard one by one from the stats
store's log (``gateway.routing.belief_others``), not a prior of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

PRIOR_WEIGHT = 2.0
"""What the defaults below count as: ``SPREAD`` as this many answers, ``BETWEEN`` as this many deployments."""
BETWEEN = 1.0
"""How far (log sd) a model's deployments' levels lie apart before they are measured: a factor e."""
SPREAD = 0.4
"""An answer's log spread around its level before the deployment's own is learned (p95 ≈ 1.9× the median)."""
DRIFT = 0.002
"""Variance of a log level gained per second unheard: unheard for 1/DRIFT s, it is e-fold uncertain."""
MEMORY = 50
"""Answers a running average remembers (the older fade): the answers' spread around a level, and an answer length
per request shape, are the last ~50 answers'."""


@dataclass(frozen=True, slots=True)
class Prior:
    """Where a new run's level starts, per metric: mean and variance of the log level (None: unknown)."""

    mean: tuple[float | None, float | None] = (None, None)
    var: tuple[float, float] = (BETWEEN**2, BETWEEN**2)


class Levels(Protocol):
    """What the prior reads of a belief: whether it heard anything, and its level now."""

    answers: int

    def level(self, now: float, metric: int) -> tuple[float, float]: ...


def log_of(value: float | None) -> float | None:
    return math.log(value) if value is not None and value > 0 else None


def pooled(others: Sequence[Levels], now: float) -> Prior:
    """The prior a deployment borrows from the model's others: a hierarchical normal. Their levels' mean, and
    around it the spread between deployments (``BETWEEN`` counted as ``PRIOR_WEIGHT`` deployments, then theirs),
    plus the uncertainty of that mean."""
    means: list[float | None] = []
    variances: list[float] = []
    for metric in (0, 1):
        levels = [b.level(now, metric)[0] for b in others if b.answers]
        if not levels:
            means.append(None)
            variances.append(BETWEEN**2)
            continue
        k = len(levels)
        mean = sum(levels) / k
        between = (PRIOR_WEIGHT * BETWEEN**2 + sum((x - mean) ** 2 for x in levels)) / (PRIOR_WEIGHT + k)
        means.append(mean)
        variances.append(between * (1 + 1 / k))
    return Prior((means[0], means[1]), (variances[0], variances[1]))
