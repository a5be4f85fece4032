"""The answers' scatter around the level, with change points of its own (a tail may narrow while the median stays).

Per metric, a few hypotheses "the scatter has been the same since this answer", each with its sums (``Scatter``)
and a weight; a new one starts from the siblings' scatter with the hazard's chance. Each is weighed by the answer's
density with the level marginalised over the level's runs, so a far answer that a level jump explains moves no
scatter. The sums are squared residuals against the heaviest run, read robustly (a Student-t's weight) over the last
~``MEMORY`` answers, with the siblings' scatter counted as ``PRIOR_WEIGHT`` answers: ``noise`` is the t's scale,
``spread2`` the plain log variance for means and quantiles. The belief reads the likeliest scatter. See
docs/routing.md ("What the router knows").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from gateway.routing.belief_runs import METRICS, SPT, TTFT, Run, finite, heaviest_first
from gateway.routing.priors import MEMORY, PRIOR_WEIGHT, SPREAD, Prior
from gateway.routing.student import TAIL_NU, censored_square

SCATTERS: Final = 3
"""Scatter hypotheses kept per metric: a cost of the computation, not a fact of the world."""


@dataclass(slots=True)
class Scatter:
    """One hypothesis on one metric's scatter: its sums and its weight."""

    weight: float
    noise: float = SPREAD**2
    """The Student-t's scale (log variance)."""
    spread2: float = SPREAD**2
    """The answers' plain log variance around the level."""
    n: float = 0.0
    """Answers' worth heard, beside the prior's ``PRIOR_WEIGHT``."""
    marginal: float = field(default=0.0, init=False, compare=False, repr=False)
    """Scratch for ``_weigh``, not state."""

    def __init__(self, weight: float, noise: float = SPREAD**2, spread2: float = SPREAD**2, n: float = 0.0) -> None:
        # Written out so that mypyc compiles it (as ``belief_runs.Run``).
        self.weight = weight
        self.noise = noise
        self.spread2 = spread2
        self.n = n
        self.marginal = 0.0


def learn_noise(
    scatters: list[Scatter],
    level: tuple[float, float, float],
    value: float | None,
    bound: float | None,
    prior: tuple[float, float],
    unsure: float,
) -> None:
    """Teach each scatter one ``value`` (or a lower ``bound``, read by its expected squared residual beyond it)
    against ``level``, the heaviest run's (mean, variance, the value's squared residual against that mean as
    ``student.likelihoods`` found it). ``prior``: the siblings' noise and spread, counted as ``PRIOR_WEIGHT``
    answers. ``unsure``: the value's own log variance (a base read at an unlearned slope)."""
    # E[(y - m)^2] is the answers' variance plus the level's (and the value's own): an answer teaches the spread
    # only in the first's share, so a level known roughly learns where it is, not how far answers scatter.
    centre, var, square = level
    if value is None:
        if bound is None:
            return
        square = 0.0  # a bound's depends on each scatter's spread: found in the loop
    level_var = var + unsure
    prior_noise, prior_spread = PRIOR_WEIGHT * prior[0], PRIOR_WEIGHT * prior[1]
    keep = 1 - 1 / MEMORY  # fading sums over the last ~MEMORY answers
    for sums in scatters:
        if value is None and bound is not None:
            square = censored_square(bound, centre, sums.spread2 + var)
        residual = square - level_var
        residual = residual if residual > 0.0 else 0.0  # max(0.0, residual), NaN to 0.0
        scale = sums.noise
        counts = scale / (scale + level_var)
        robust = residual * (TAIL_NU + 1) / (TAIL_NU + residual / scale)
        # The prior's share is taken out before fading and put back.
        heard = PRIOR_WEIGHT + sums.n
        n = sums.n * keep
        weight = PRIOR_WEIGHT + n + counts
        total = (scale * heard - prior_noise) * keep + counts * robust
        sums.noise = (prior_noise + total) / weight
        total = (sums.spread2 * heard - prior_spread) * keep + counts * residual
        sums.spread2 = (prior_spread + total) / weight
        sums.n = n + counts


def hear_both(
    scatters: list[list[Scatter]],
    mixed: tuple[list[float], list[float]],
    levels: tuple[list[Run], Run],
    evidence: tuple[tuple[float | None, ...], tuple[float | None, ...]],
    prior: Prior,
    change: float,
    unsure: float,
) -> None:
    """Hear one answer's value or lower bound per metric; ``levels`` are the runs (their ``chance`` before it set)
    and the heaviest run. A new scatter starts from the siblings' (``prior``) with the chance ``change``; each is
    weighed by the value's density (a bound weighs none) and taught it against the heaviest run, and the
    ``SCATTERS`` heaviest are kept. Sets ``mixed`` (the belief's noise and spread2) to the likeliest scatter's."""
    values, bounds = evidence
    runs, best = levels
    noise, spread2 = prior.noise, prior.spread2
    # ``for metric in METRICS`` and ``prior.noise[metric]``, written so that compiled code neither iterates a module
    # global's tuple nor boxes the prior's pairs to index them: the same metrics in the same order, the same floats.
    for metric in range(SPT + 1):
        value, bound = values[metric], bounds[metric]
        if value is None and bound is None:
            continue
        ttft = metric == TTFT
        siblings = (noise[TTFT], spread2[TTFT]) if ttft else (noise[SPT], spread2[SPT])
        kept = scatters[metric]
        if change > 0.0:
            for scatter in kept:
                scatter.weight *= 1.0 - change
            kept.append(Scatter(change, siblings[0], siblings[1]))
        own = unsure if ttft else 0.0
        if value is not None and len(kept) > 1:
            _weigh(kept, (runs, metric), own)
        heaviest = (best.mean0, best.var0, best.square0) if ttft else (best.mean1, best.var1, best.square1)
        learn_noise(kept, heaviest, value, bound, siblings, own)
        kept = scatters[metric] = _prune(kept)
        mixed[0][metric], mixed[1][metric] = likeliest(kept)


def reprior_scatters(
    scatters: list[list[Scatter]], noise: list[float], spread2: list[float], was: list[float], now: list[float]
) -> None:
    """Move every scatter's ``PRIOR_WEIGHT`` answers' worth of prior from ``was`` to ``now`` (noise per metric, then
    spread per metric), and set ``noise`` and ``spread2`` to the likeliest scatter's again."""
    for metric in METRICS:
        kept = scatters[metric]
        for scatter in kept:
            heard = PRIOR_WEIGHT + scatter.n
            scatter.noise += PRIOR_WEIGHT * (now[metric] - was[metric]) / heard
            scatter.spread2 += PRIOR_WEIGHT * (now[2 + metric] - was[2 + metric]) / heard
        noise[metric], spread2[metric] = likeliest(kept)


def likeliest(scatters: list[Scatter]) -> tuple[float, float]:
    """The most likely scatter's Student-t scale and plain log variance."""
    top = _heaviest(scatters)
    return top.noise, top.spread2


def collapsed(scatters: list[Scatter]) -> Scatter:
    """The most likely scatter alone, as certain."""
    top = _heaviest(scatters)
    return Scatter(1.0, top.noise, top.spread2, top.n)


def _heaviest(scatters: list[Scatter]) -> Scatter:
    top = scatters[0]
    for scatter in scatters:
        if scatter.weight > top.weight:
            top = scatter
    return top


def _weigh(scatters: list[Scatter], levels: tuple[list[Run], int], unsure: float) -> None:
    """Multiply each scatter's weight by the answer's Student-t density with the level marginalised over the runs.
    One pass over the runs serves every scatter; each sum still adds in run order from 0.0. Reads the runs' squared
    residuals as ``student.likelihoods`` set them, and their chances before the answer (``Run.chance``)."""
    runs, metric = levels
    for scatter in scatters:
        scatter.marginal = 0.0
    for run in runs:
        square = run.square0 if metric == TTFT else run.square1  # ``student.likelihoods``' (value − mean)²
        var = run.var0 if metric == TTFT else run.var1
        variance = var + unsure
        chance = run.chance
        for scatter in scatters:
            scale2 = variance + scatter.noise
            kernel = math.pow(1.0 + square / scale2 / TAIL_NU, -(TAIL_NU + 1) / 2)
            scatter.marginal += chance * kernel / math.sqrt(scale2)
    for scatter in scatters:
        scatter.weight *= scatter.marginal


def _prune(scatters: list[Scatter]) -> list[Scatter]:
    """Normalise and keep the ``SCATTERS`` heaviest; where every weight vanished, the oldest alone."""
    total = 0.0
    for scatter in scatters:
        total += scatter.weight
    if not (total > 0.0 and finite(total)):
        keep = scatters[0]
        keep.weight = 1.0
        return [keep]
    if len(scatters) > SCATTERS:
        heaviest_first(scatters, [scatter.weight for scatter in scatters])
        while len(scatters) > SCATTERS:  # ``del scatters[SCATTERS:]`` without a slice made
            scatters.pop()
        total = 0.0
        for scatter in scatters:
            total += scatter.weight
    for scatter in scatters:
        scatter.weight /= total
    return scatters
