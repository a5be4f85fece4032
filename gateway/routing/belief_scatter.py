"""The answers' scatter around the level, with change points of its own (a tail may narrow while the median stays).

Per metric, a few hypotheses "the scatter has been the same since this answer", each with its sums
(``belief_noise``) and a weight; a new one starts from the siblings' scatter with the hazard's chance. Each is
weighed by the answer's density with the level marginalised over the level's runs, so a far answer that a level
jump explains moves no scatter. The belief reads the likeliest scatter. See docs/routing.md ("What the router knows").
"""

from __future__ import annotations

import math
from typing import Final

from gateway.routing.belief_noise import Scatter, learn_noise
from gateway.routing.belief_runs import METRICS, SPT, TTFT, Run, finite, heaviest_first
from gateway.routing.priors import PRIOR_WEIGHT, Prior
from gateway.routing.student import TAIL_NU

SCATTERS: Final = 3
"""Scatter hypotheses kept per metric: a cost of the computation, not a fact of the world."""
_POWER: Final = -(TAIL_NU + 1) / 2


def hear_both(
    scatters: list[list[Scatter]],
    mixed: tuple[list[float], list[float]],
    levels: tuple[list[Run], Run],
    evidence: tuple[tuple[float | None, ...], tuple[float | None, ...]],
    prior: Prior,
    change: float,
    unsure: float,
) -> None:
    """``hear`` one answer's values or bounds per metric; ``levels`` are the runs (their ``chance`` before it set)
    and the heaviest run. Sets ``mixed`` (the belief's noise and spread2) to the likeliest scatter's."""
    values, bounds = evidence
    runs, best = levels
    noise, spread2 = prior.noise, prior.spread2
    # ``for metric in METRICS`` and ``prior.noise[metric]``, written so that compiled code neither iterates a module
    # global's tuple nor boxes the prior's pairs to index them: the same metrics in the same order, the same floats.
    for metric in range(SPT + 1):
        value, bound = values[metric], bounds[metric]
        if value is None and bound is None:
            continue
        kept = scatters[metric] = hear(
            scatters[metric],
            (runs, metric),
            (best.mean0, best.var0, best.square0) if metric == TTFT else (best.mean1, best.var1, best.square1),
            (value, bound),
            (noise[TTFT], spread2[TTFT]) if metric == TTFT else (noise[SPT], spread2[SPT]),
            change,
            unsure if metric == TTFT else 0.0,
        )
        mixed[0][metric], mixed[1][metric] = likeliest(kept)


def hear(
    scatters: list[Scatter],
    levels: tuple[list[Run], int],
    best: tuple[float, float, float],
    evidence: tuple[float | None, float | None],
    prior: tuple[float, float],
    change: float,
    unsure: float = 0.0,
) -> list[Scatter]:
    """One metric's value or lower bound: a new scatter from ``prior`` with the chance ``change``, each scatter
    weighed by the value's density and taught it against ``best`` (the heaviest run's level and the value's squared
    residual against it). A bound teaches every scatter but weighs none. Returns the ``SCATTERS`` heaviest,
    normalised."""
    value, bound = evidence
    if change > 0.0:
        for scatter in scatters:
            scatter.weight *= 1.0 - change
        scatters.append(Scatter(change, prior[0], prior[1]))
    if value is not None and len(scatters) > 1:
        _weigh(scatters, levels, unsure)
    learn_noise(scatters, (best[0], best[1]), value, bound, prior, unsure, best[2])
    return _prune(scatters)


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
            scatter.marginal += chance * math.pow(1.0 + square / scale2 / TAIL_NU, _POWER) / math.sqrt(scale2)
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
