"""The sums one scatter hypothesis keeps of the answers' spread around the level (``belief_scatter``).

Squared residuals against the heaviest run, read robustly (a Student-t's weight) over the last ~``MEMORY``
answers, with the siblings' scatter counted as ``PRIOR_WEIGHT`` answers. ``noise`` is the t's scale, ``spread2``
the plain log variance for means and quantiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from gateway.routing.priors import MEMORY, PRIOR_WEIGHT, SPREAD
from gateway.routing.student import TAIL_NU, censored_square

_KEEP: Final = 1 - 1 / MEMORY
_SPREAD2: Final = SPREAD**2


@dataclass(slots=True)
class Scatter:
    """One hypothesis on one metric's scatter: its sums and its weight."""

    weight: float
    noise: float = _SPREAD2
    """The Student-t's scale (log variance)."""
    spread2: float = _SPREAD2
    """The answers' plain log variance around the level."""
    n: float = 0.0
    """Answers' worth heard, beside the prior's ``PRIOR_WEIGHT``."""
    marginal: float = field(default=0.0, init=False, compare=False, repr=False)
    """Scratch for ``belief_scatter._weigh``, not state."""

    def __init__(self, weight: float, noise: float = _SPREAD2, spread2: float = _SPREAD2, n: float = 0.0) -> None:
        # Written out so that mypyc compiles it (as ``belief_runs.Run``).
        self.weight = weight
        self.noise = noise
        self.spread2 = spread2
        self.n = n
        self.marginal = 0.0


def learn_noise(
    scatters: list[Scatter],
    level: tuple[float, float],
    value: float | None,
    bound: float | None = None,
    prior: tuple[float, float] = (SPREAD**2, SPREAD**2),
    unsure: float = 0.0,
    square: float | None = None,
) -> None:
    """Teach each scatter one ``value`` (or a lower ``bound``, read by its expected squared residual beyond it)
    against ``level``, the heaviest run's (mean, variance). ``prior``: the siblings' noise and spread, counted as
    ``PRIOR_WEIGHT`` answers. ``unsure``: the value's own log variance (a base read at an unlearned slope).
    ``square``: ``(value − level mean)²`` when the caller has it (``student.likelihoods`` found it), else found here."""
    # E[(y - m)^2] is the answers' variance plus the level's (and the value's own): an answer teaches the spread
    # only in the first's share, so a level known roughly learns where it is, not how far answers scatter.
    centre, var = level
    if value is not None:
        square = math.pow(value - centre, 2.0) if square is None else square
    elif bound is None:
        return
    else:
        square = 0.0  # a bound's depends on each scatter's spread: found in the loop
    level_var = var + unsure
    prior_noise, prior_spread = PRIOR_WEIGHT * prior[0], PRIOR_WEIGHT * prior[1]
    for sums in scatters:
        if value is None and bound is not None:
            square = censored_square(bound, centre, sums.spread2 + var)
        residual = square - level_var
        residual = residual if residual > 0.0 else 0.0  # max(0.0, residual), NaN to 0.0
        scale = sums.noise
        counts = scale / (scale + level_var)
        robust = residual * (TAIL_NU + 1) / (TAIL_NU + residual / scale)
        # Fading sums over the last ~MEMORY answers; the prior's share is taken out before fading and put back.
        heard = PRIOR_WEIGHT + sums.n
        n = sums.n * _KEEP
        weight = PRIOR_WEIGHT + n + counts
        total = (scale * heard - prior_noise) * _KEEP + counts * robust
        sums.noise = (prior_noise + total) / weight
        total = (sums.spread2 * heard - prior_spread) * _KEEP + counts * residual
        sums.spread2 = (prior_spread + total) / weight
        sums.n = n + counts
