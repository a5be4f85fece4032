"""The answers' scatter around the level with change points of its own (``gateway.routing.belief``).

A provider's scatter may change while its level stays (a heavy first-token tail that narrows, its median
unchanged), and the level may jump while the scatter stays. So the scatter has run-length hypotheses of its own,
per metric, beside the level's: "the scatter has been the same since this answer", each with its own sums
(``belief_noise.learn_noise``) and a weight. A new one may start at each answer with the hazard's chance of a
change since last heard (the model's learned hazard, ``Hazard.every_s`` of ``gateway.routing.belief_hazard``, read
as the level reads it: one chance per answer, passed in), from the siblings' scatter (``priors.pooled``), and the
``SCATTERS`` heaviest are kept.

Each scatter hypothesis is weighed by how well it predicted the answer with the level *marginalised*: the
answer's Student-t density under every level run, a change of level included, at that run's chance before the
answer. Where a jump of the level explains a far answer, every scatter explains it about as well through the
landing's run, and the scatter's weights hardly move: the level's change points take a level jump, and only
answers no level hypothesis explains (answers that stay near the level where the scatter was believed wide, or
scatter both ways where it was believed narrow) move the weight to a new scatter.

The belief reads the most likely scatter (``likeliest``: ``Belief.noise``, ``Belief.spread2``; the level's runs are
judged at it, the answers' spread is read from it). A new scatter moves nothing until the posterior finds it more
likely than the one that held: a few far answers after a jump of the level, which a new scatter explains for an
answer or two beside the level's own change, do not widen the spread meanwhile (read as the weights' mixture, they
did, and the level followed a jump a little later). Where no scatter overtakes the first, the belief is what one
scatter learned over every answer makes it.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Final

from gateway.routing.belief_noise import Scatter, learn_noise
from gateway.routing.belief_runs import Run
from gateway.routing.priors import PRIOR_WEIGHT, Prior
from gateway.routing.student import TAIL_NU

SCATTERS: Final = 3
"""Scatter hypotheses kept per metric (the cost of its change-point detection, not a knob of the world)."""
_POWER: Final = -(TAIL_NU + 1) / 2
_WEIGHT = attrgetter("weight")
TTFT: Final = 0
SPT: Final = 1
METRICS = (TTFT, SPT)


def hear_both(
    scatters: list[list[Scatter]],
    mixed: tuple[list[float], list[float]],
    levels: tuple[list[float], list[Run], Run],
    evidence: tuple[tuple[float | None, ...], tuple[float | None, ...]],
    prior: Prior,
    change: float,
    unsure: float,
) -> None:
    """One answer's ``evidence`` (values, lower bounds), each metric's ``hear``d by its scatters: ``levels`` are the
    level runs' chances before this answer, the runs, and the heaviest run after it; ``unsure`` the first token's own
    (``Belief.observe``). ``mixed`` (the belief's noise and spread2) set to the likeliest scatter's, per metric."""
    values, bounds = evidence
    chances, runs, best = levels
    for metric in METRICS:
        value, bound = values[metric], bounds[metric]
        if value is None and bound is None:
            continue
        kept = scatters[metric] = hear(
            scatters[metric],
            (chances, runs, metric),
            best.level(metric),
            (value, bound),
            (prior.noise[metric], prior.spread2[metric]),
            change,
            unsure if metric == TTFT else 0.0,
        )
        mixed[0][metric], mixed[1][metric] = likeliest(kept)


def hear(
    scatters: list[Scatter],
    levels: tuple[list[float], list[Run], int],
    best: tuple[float, float],
    evidence: tuple[float | None, float | None],
    prior: tuple[float, float],
    change: float,
    unsure: float = 0.0,
) -> list[Scatter]:
    """One answer's ``evidence`` of a metric (its value, or a lower bound): a new scatter with the chance ``change``
    (from ``prior``, the siblings' noise and spread), each weighed by the answer's density with the level
    marginalised over ``levels`` (each level run's chance before this answer, the runs, the metric), each learning it
    against ``best`` (the heaviest level run's mean and variance, as before); the ``SCATTERS`` heaviest kept, their
    weights summing to one. A bound is learned by every scatter but weighs none (it tells of the scatter only
    through what it hides)."""
    value, bound = evidence
    if change > 0.0:
        for scatter in scatters:
            scatter.weight *= 1.0 - change
        scatters.append(Scatter(change, prior[0], prior[1]))
    if value is not None and len(scatters) > 1:
        _weigh(scatters, levels, value, unsure)
    learn_noise(scatters, best, value, bound, prior, unsure)
    return _prune(scatters)


def reprior_scatters(
    scatters: list[list[Scatter]], noise: list[float], spread2: list[float], was: list[float], now: list[float]
) -> None:
    """Count the siblings' scatter ``now`` (noise per metric, then spread per metric) as every scatter's prior in place
    of ``was``: the answers each heard weigh the same, the ``PRIOR_WEIGHT`` answers' worth is moved; ``noise`` and
    ``spread2`` set to the likeliest scatter's again."""
    for metric in METRICS:
        kept = scatters[metric]
        for scatter in kept:
            heard = PRIOR_WEIGHT + scatter.n
            scatter.noise += PRIOR_WEIGHT * (now[metric] - was[metric]) / heard
            scatter.spread2 += PRIOR_WEIGHT * (now[2 + metric] - was[2 + metric]) / heard
        noise[metric], spread2[metric] = likeliest(kept)


def likeliest(scatters: list[Scatter]) -> tuple[float, float]:
    """The most likely scatter's t scale and plain log variance (the first of the heaviest)."""
    top = _heaviest(scatters)
    return top.noise, top.spread2


def collapsed(scatters: list[Scatter]) -> Scatter:
    """The most likely scatter alone, as certain (a plan's copy)."""
    top = _heaviest(scatters)
    return Scatter(1.0, top.noise, top.spread2, top.n)


def _heaviest(scatters: list[Scatter]) -> Scatter:
    top = scatters[0]
    for scatter in scatters:
        if scatter.weight > top.weight:
            top = scatter
    return top


def _weigh(scatters: list[Scatter], levels: tuple[list[float], list[Run], int], value: float, unsure: float) -> None:
    """Each scatter's weight times the answer's Student-t density at its scale with the level marginalised over the
    runs (``levels``: each run's chance, the runs, the metric). One pass over the runs for every scatter: a run's
    squared distance from the answer and its variance are found once, and each scatter's sum still adds its runs'
    terms in order from 0.0 (``Scatter.marginal``)."""
    chances, runs, metric = levels
    for scatter in scatters:
        scatter.marginal = 0.0
    for i in range(len(runs)):
        mean, var = runs[i].level(metric)
        square = math.pow(value - mean, 2.0)
        variance = var + unsure
        chance = chances[i]
        for scatter in scatters:
            scale2 = variance + scatter.noise
            scatter.marginal += chance * math.pow(1.0 + square / scale2 / TAIL_NU, _POWER) / math.sqrt(scale2)
    for scatter in scatters:
        scatter.weight *= scatter.marginal


def _prune(scatters: list[Scatter]) -> list[Scatter]:
    """Weights summing to one, the ``SCATTERS`` heaviest kept; where every weight vanished, the oldest alone."""
    total = 0.0
    for scatter in scatters:
        total += scatter.weight
    if not (total > 0.0 and math.isfinite(total)):
        keep = scatters[0]
        keep.weight = 1.0
        return [keep]
    if len(scatters) > SCATTERS:
        _heaviest_first(scatters)
        del scatters[SCATTERS:]
        total = 0.0
        for scatter in scatters:
            total += scatter.weight
    for scatter in scatters:
        scatter.weight /= total
    return scatters


def _heaviest_first(scatters: list[Scatter]) -> None:
    """``scatters.sort(key=weight, reverse=True)`` written out (``belief_runs._heaviest_first``: the same order,
    ``sort`` itself where a weight is NaN; ``_prune`` sorts a finite sum's)."""
    for scatter in scatters:
        if scatter.weight != scatter.weight:
            scatters.sort(key=_WEIGHT, reverse=True)
            return
    for i in range(1, len(scatters)):
        scatter = scatters[i]
        weight = scatter.weight
        j = i
        while j > 0 and scatters[j - 1].weight < weight:
            scatters[j] = scatters[j - 1]
            j -= 1
        scatters[j] = scatter
