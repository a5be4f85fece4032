"""The answers' own spread around a deployment's level (``gateway.routing.belief``): learned from every answer.

Squared residuals against the heaviest run, read robustly (a Student-t's weight) and summed over the last
~``MEMORY`` answers, with a prior of ``SPREAD`` counting as ``PRIOR_WEIGHT`` answers. Two sums are kept: ``noise``
(the t's scale, robust) and ``spread2`` (the plain log variance, for means and quantiles). Pure arithmetic on the
belief's lists, written out because it runs for every answer and every running stream on every plan.
"""

from __future__ import annotations

from gateway.routing.priors import MEMORY, PRIOR_WEIGHT, SPREAD
from gateway.routing.student import TAIL_NU, Hypothesis, censored_square

_PRIOR_SQUARES = PRIOR_WEIGHT * SPREAD**2
_KEEP = 1 - 1 / MEMORY


def learn_noise(
    noise: list[float],
    spread2: list[float],
    noise_n: list[float],
    best: Hypothesis,
    metric: int,
    value: float | None,
    bound: float | None = None,
) -> None:
    """One answer's ``value`` (or lower ``bound``: a race lost, a hedge won, the slow tail hedges cut off, read by
    its expected squared residual beyond it) of ``metric`` against ``best`` (the heaviest run): the sums updated."""
    # E[(y - m)^2] = the answers' variance + the level's own; an answer tells of the first only in its share of the
    # two (the first answer of a level known roughly says where the level is, hardly how far answers scatter).
    if value is not None:
        square = (value - best.mean[metric]) ** 2
    elif bound is not None:
        square = censored_square(bound, best.mean[metric], spread2[metric] + best.var[metric])
    else:
        return
    level_var = best.var[metric]
    residual = square - level_var
    residual = residual if residual > 0.0 else 0.0  # max(0.0, residual), a NaN included
    scale = noise[metric]
    counts = scale / (scale + level_var)
    robust = residual * (TAIL_NU + 1) / (TAIL_NU + residual / scale)
    # Sums over the last ~MEMORY answers: n counts them, the sum of squares is ``(noise - prior) ...``.
    heard = PRIOR_WEIGHT + noise_n[metric]
    n = noise_n[metric] * _KEEP
    weight = PRIOR_WEIGHT + n + counts
    total = (noise[metric] * heard - _PRIOR_SQUARES) * _KEEP + counts * robust
    noise[metric] = (_PRIOR_SQUARES + total) / weight
    total = (spread2[metric] * heard - _PRIOR_SQUARES) * _KEEP + counts * residual
    spread2[metric] = (_PRIOR_SQUARES + total) / weight
    noise_n[metric] = n + counts
