"""A draw from a belief: one plausible present, and how it is drawn.

``Belief.draw`` and a look's knowledge gradient (``belief_look``) draw the same way: a run by its weight, its
level's normal with drift, and the failure chance's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist
from typing import NamedTuple


class Draw(NamedTuple):
    """One plausible present for a deployment: median first token, seconds per token, failure chance."""

    ttft_s: float
    s_per_token: float
    failure: float
    spread: tuple[float, float]
    failure_s: float = 0.0
    """What a failure costs before the fallback starts."""
    changed: bool = False
    """Drawn as a level that changed since it was last heard, not from its own runs."""
    levels: tuple[float, float] = (0.0, 0.0)
    """The drawn levels in seconds, kept apart from later changes to ``ttft_s`` and ``s_per_token``."""


new_tuple = tuple.__new__
"""``new_tuple(Draw, fields)`` is ``Draw(*fields)`` (every field given) without the named tuple's Python ``__new__``."""


class Level:
    """One run a draw may pick: its weight and, per metric, its log level's mean and sd (drift included)."""

    __slots__ = ("weight", "mean0", "sd0", "mean1", "sd1")

    def __init__(self, weight: float, mean0: float, sd0: float, mean1: float, sd1: float) -> None:
        self.weight = weight
        self.mean0 = mean0
        self.sd0 = sd0
        self.mean1 = mean1
        self.sd1 = sd1


def pick(levels: list[Level], uniform: float) -> Level:
    """The run a uniform number in [0, 1) falls on, the weights summing to one (the last where they fall short)."""
    for level in levels:
        uniform -= level.weight
        if uniform <= 0:
            return level
    return levels[-1]


STANDARD_NORMAL = NormalDist()
"""The standard normal's cdf and quantiles, for the package's every use."""


def normal_pair(uniform: Callable[[], float]) -> tuple[float, float]:
    """Two standard normals exactly as ``random.gauss`` makes a pair (Box-Muller: the cosine's, then the sine's)."""
    x2pi = uniform() * math.tau  # ``random.TWOPI``
    g2rad = math.sqrt(-2.0 * math.log(1.0 - uniform()))
    return math.cos(x2pi) * g2rad, math.sin(x2pi) * g2rad
