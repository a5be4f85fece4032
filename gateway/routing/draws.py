"""A draw from a belief (``gateway.routing.belief``): what one plausible present is, and how one is drawn.

``Belief.draw`` and the look's knowledge gradient (``gateway.routing.choose.gain``) draw the same way: a
run by its weight, its level's normal with drift, and the failure chance's; the gradient finds what it
draws from (``Belief.sampling``) once for many draws.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
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
    """Drawn as a level new since it was last heard (from the prior, by the hazard), not from its own answers."""
    levels: tuple[float, float] = (0.0, 0.0)
    """The drawn levels themselves (seconds; ``ttft_s`` and ``s_per_token`` again, kept apart from any later change)."""


new_tuple = tuple.__new__
"""What a named tuple's ``__new__`` calls with its fields: ``new_tuple(Draw, fields)`` is ``Draw(*fields)`` (every
field given, defaults too) without that ``__new__``, a Python function even where its caller is compiled."""

Sampling = tuple[list[tuple[float, float, float, float, float]], float, float]
"""(weight, log mean and sd of first token, of seconds per token) per run, drift included; the failure chance's mean
and sd (``Belief.sampling``)."""


def sample(sampling: Sampling, rng: random.Random) -> tuple[float, float, float]:
    """One draw from ``Belief.sampling``: a run by its weight, its level (first token and seconds per token, in
    seconds), and a failure chance."""
    levels, failure_mean, failure_sd = sampling
    pick = rng.random()  # the runs' weights sum to one (``_prune``, ``_new_runs``)
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


_TWOPI = 2.0 * math.pi
"""``random.TWOPI``."""


def standard_normals(uniform: Callable[[], float], carry: float | None, count: int) -> list[float]:
    """At least ``count`` standard normals, as that many calls of ``random.Random.gauss`` make them after one that
    left ``carry`` (its ``gauss_next``): Box–Muller pairs of two ``uniform()``, the cosine's given first, the
    sine's kept. An odd one left over is the list's last (the next carry). A look's draws make theirs in their
    loop the same way (``belief_look.gains``)."""
    normals = [] if carry is None else [carry]
    while len(normals) < count:
        x2pi = uniform() * _TWOPI
        g2rad = math.sqrt(-2.0 * math.log(1.0 - uniform()))
        normals.append(math.cos(x2pi) * g2rad)
        normals.append(math.sin(x2pi) * g2rad)
    return normals
