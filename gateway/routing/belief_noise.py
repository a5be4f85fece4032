"""The answers' own spread around a deployment's level (``gateway.routing.belief``): learned from every answer.

Squared residuals against the heaviest run, read robustly (a Student-t's weight) and summed over the last
~``MEMORY`` answers, with a prior counting as ``PRIOR_WEIGHT`` answers: the model's other deployments' spread
(``priors.pooled``), ``SPREAD`` before any is measured. Two sums are kept: ``noise`` (the t's scale, robust) and
``spread2`` (the plain log variance, for means and quantiles). Pure arithmetic on the belief's lists, written out
because it runs for every answer and every running stream on every plan.
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
    """One hypothesis on one metric's scatter (``gateway.routing.belief_scatter``): the sums kept here, and its
    chance."""

    weight: float
    noise: float = _SPREAD2
    """The Student-t's scale (log variance), robust."""
    spread2: float = _SPREAD2
    """The answers' plain log variance around the level."""
    n: float = 0.0
    """Answers' worth heard (the prior's ``PRIOR_WEIGHT`` besides)."""
    marginal: float = field(default=0.0, init=False, compare=False, repr=False)
    """Scratch, not state: the answer's density with the level marginalised, while ``belief_scatter.hear`` weighs."""

    def __init__(self, weight: float, noise: float = _SPREAD2, spread2: float = _SPREAD2, n: float = 0.0) -> None:
        # Written out (the generated one's fields and defaults): compiled, a native method (``belief_runs.Run``).
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
) -> None:
    """One answer's ``value`` (or lower ``bound``: a race lost, a hedge won, the slow tail hedges cut off, read by
    its expected squared residual beyond it) against ``level`` (the heaviest run's mean and variance of its metric):
    each scatter's sums updated (what does not depend on the scatter found once: a value's squared residual, the
    prior's share).
    ``prior``: the noise and spread counted in the sums as ``PRIOR_WEIGHT`` answers (the siblings',
    ``priors.pooled``; ``Belief.reprior`` keeps the sums' share of it current). ``unsure``: the log variance the
    value carries besides the answers' own (a first token less a prefill of a slope not yet learned)."""
    # E[(y - m)^2] = the answers' variance + the level's own (+ the value's own unsureness); an answer tells of the
    # first only in its share of them (the first answer of a level known roughly says where the level is, hardly how
    # far answers scatter; a base guessed from a long prompt's first token, hardly either).
    centre, var = level
    if value is not None:
        square = math.pow(value - centre, 2.0)
    elif bound is None:
        return
    else:
        square = 0.0  # a bound's is the scatter's own (``censored_square`` of its spread)
    level_var = var + unsure
    prior_noise, prior_spread = PRIOR_WEIGHT * prior[0], PRIOR_WEIGHT * prior[1]
    for sums in scatters:
        if value is None and bound is not None:
            square = censored_square(bound, centre, sums.spread2 + var)
        residual = square - level_var
        residual = residual if residual > 0.0 else 0.0  # max(0.0, residual), a NaN included
        scale = sums.noise
        counts = scale / (scale + level_var)
        robust = residual * (TAIL_NU + 1) / (TAIL_NU + residual / scale)
        # Sums over the last ~MEMORY answers: n counts them, the sum of squares is ``(noise - prior) ...``.
        heard = PRIOR_WEIGHT + sums.n
        n = sums.n * _KEEP
        weight = PRIOR_WEIGHT + n + counts
        total = (scale * heard - prior_noise) * _KEEP + counts * robust
        sums.noise = (prior_noise + total) / weight
        total = (sums.spread2 * heard - prior_spread) * _KEEP + counts * residual
        sums.spread2 = (prior_spread + total) / weight
        sums.n = n + counts
