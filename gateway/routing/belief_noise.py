"""The answers' own spread around a deployment's level (``gateway.routing.belief``): learned from every answer.

Squared residuals against the heaviest run, read robustly (a Student-t's weight) and summed over the last
~``MEMORY`` answers, with a prior counting as ``PRIOR_WEIGHT`` answers: the model's other deployments' spread
(``priors.pooled``), ``SPREAD`` before any is measured. Two sums are kept: ``noise`` (the t's scale, robust) and
``spread2`` (the plain log variance, for means and quantiles). Pure arithmetic on the belief's lists, written out
because it runs for every answer and every running stream on every plan.
"""

from __future__ import annotations

import math

from gateway.routing.priors import MEMORY, PRIOR_WEIGHT, SPREAD
from gateway.routing.student import TAIL_NU, Hypothesis, censored_square

_KEEP = 1 - 1 / MEMORY


def learn_noise(
    noise: list[float],
    spread2: list[float],
    noise_n: list[float],
    best: Hypothesis,
    metric: int,
    value: float | None,
    bound: float | None = None,
    prior: tuple[float, float] = (SPREAD**2, SPREAD**2),
    unsure: float = 0.0,
) -> None:
    """One answer's ``value`` (or lower ``bound``: a race lost, a hedge won, the slow tail hedges cut off, read by
    its expected squared residual beyond it) of ``metric`` against ``best`` (the heaviest run): the sums updated.
    ``prior``: the noise and spread counted in the sums as ``PRIOR_WEIGHT`` answers (the siblings',
    ``priors.pooled``; ``Belief.reprior`` keeps the sums' share of it current). ``unsure``: the log variance the
    value carries besides the answers' own (a first token less a prefill of a slope not yet learned)."""
    # E[(y - m)^2] = the answers' variance + the level's own (+ the value's own unsureness); an answer tells of the
    # first only in its share of them (the first answer of a level known roughly says where the level is, hardly how
    # far answers scatter; a base guessed from a long prompt's first token, hardly either).
    if value is not None:
        square = math.pow(value - best.mean[metric], 2.0)
    elif bound is not None:
        square = censored_square(bound, best.mean[metric], spread2[metric] + best.var[metric])
    else:
        return
    level_var = best.var[metric] + unsure
    residual = square - level_var
    residual = residual if residual > 0.0 else 0.0  # max(0.0, residual), a NaN included
    scale = noise[metric]
    counts = scale / (scale + level_var)
    robust = residual * (TAIL_NU + 1) / (TAIL_NU + residual / scale)
    # Sums over the last ~MEMORY answers: n counts them, the sum of squares is ``(noise - prior) ...``.
    heard = PRIOR_WEIGHT + noise_n[metric]
    n = noise_n[metric] * _KEEP
    weight = PRIOR_WEIGHT + n + counts
    prior_noise, prior_spread = PRIOR_WEIGHT * prior[0], PRIOR_WEIGHT * prior[1]
    total = (noise[metric] * heard - prior_noise) * _KEEP + counts * robust
    noise[metric] = (prior_noise + total) / weight
    total = (spread2[metric] * heard - prior_spread) * _KEEP + counts * residual
    spread2[metric] = (prior_spread + total) / weight
    noise_n[metric] = n + counts
