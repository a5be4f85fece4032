"""A draw from a belief: one plausible present, and how it is drawn.

``Belief.draw`` and a look's knowledge gradient (``belief_look``) draw the same way: a run by its weight, its
level's normal with drift, and the failure chance's.
"""

from __future__ import annotations

import math
import random
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

Sampling = tuple[list[tuple[float, float, float, float, float]], float, float]
"""Per run (weight, log mean and sd of first token, of seconds per token), drift included; the failure chance's mean
and sd."""


def sample(sampling: Sampling, rng: random.Random) -> tuple[float, float, float]:
    """One draw from ``Belief.sampling``: first token and seconds per token in seconds, and a failure chance."""
    levels, failure_mean, failure_sd = sampling
    pick = rng.random()  # the runs' weights sum to one
    run = levels[-1]
    for candidate in levels:
        pick -= candidate[0]
        if pick <= 0:
            run = candidate
            break
    ttft = rng.gauss(run[1], run[2])
    spt = rng.gauss(run[3], run[4])
    failure = min(0.99, max(0.0, rng.gauss(failure_mean, failure_sd)))
    return math.exp(ttft), math.exp(spt), failure


STANDARD_NORMAL = NormalDist()
"""The standard normal's cdf and quantiles, for the package's every use."""
_TWOPI = 2.0 * math.pi
"""``random.TWOPI``."""


def normal_pair(uniform: Callable[[], float]) -> tuple[float, float]:
    """Two standard normals exactly as ``random.gauss`` makes a pair (Box-Muller: the cosine's, then the sine's)."""
    x2pi = uniform() * _TWOPI
    g2rad = math.sqrt(-2.0 * math.log(1.0 - uniform()))
    return math.cos(x2pi) * g2rad, math.sin(x2pi) * g2rad
