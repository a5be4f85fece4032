"""A belief's run-length hypotheses (``gateway.routing.belief``): "the level has stayed the same since this run began".

Each run holds its own normal posterior on the log level (first token and seconds per token) and a weight, the
chance it is the true one; a belief keeps at most ``RUNS`` of them. Here is what is done to the list as a whole:
where a new run starts (the prior), the runs' mixture, the heaviest, and the pruning after each answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from gateway.routing.priors import SPREAD, Prior

RUNS: Final = 5
"""Run-length hypotheses kept per deployment (the cost of change-point detection, not a knob of the world)."""
TTFT: Final = 0
SPT: Final = 1
METRICS = (TTFT, SPT)
_DEFAULT_TTFT: Final = math.log(1.0)
_DEFAULT_SPT: Final = math.log(1 / 50.0)
DEFAULT_LEVEL = (_DEFAULT_TTFT, _DEFAULT_SPT)
"""Where a model with nothing measured anywhere starts: 1 s to first token, 50 tokens/s (``UNKNOWN`` wide)."""
UNKNOWN: Final = 3.0
"""How far (log sd) a model's first token and speed may lie from ``DEFAULT_LEVEL`` before any of its deployments
is measured: a factor 20 either way. Wider than ``BETWEEN``: a far first answer (5 ms) moves the level."""
_UNKNOWN2: Final = UNKNOWN**2
_SPREAD2: Final = SPREAD**2
_WEIGHT = attrgetter("weight")


@dataclass(slots=True)
class Run:
    """One hypothesis: the level has stayed the same since this run began. Its normal posterior is four float fields
    (first token's mean and variance, then the seconds per token's), not a list per moment: compiled, a field holds a
    native double and a list a boxed one, read and rebuilt at every step of every run."""

    weight: float
    mean0: float
    """The first token's log level: its posterior mean (``TTFT``)."""
    mean1: float
    """The seconds per token's (``SPT``)."""
    var0: float
    var1: float
    born: float = 0.0
    changes: float = 0.0
    """The changes expected before it, its own birth included, given that it is the true one (what the hazard counts:
    ``belief_hazard.born_after``)."""

    def __init__(
        self,
        weight: float,
        mean0: float,
        mean1: float,
        var0: float,
        var1: float,
        born: float = 0.0,
        changes: float = 0.0,
    ) -> None:
        # Written out (the generated one's fields, in order, and defaults): compiled, a native method, where the
        # ``__init__`` ``dataclasses`` generates stays interpreted, and a run is made per change per answer and per
        # run of every plan's copy.
        self.weight = weight
        self.mean0 = mean0
        self.mean1 = mean1
        self.var0 = var0
        self.var1 = var1
        self.born = born
        self.changes = changes

    def level(self, metric: int) -> tuple[float, float]:
        """The posterior mean and variance of ``metric``'s log level (``TTFT`` or ``SPT``)."""
        return (self.mean0, self.var0) if metric == TTFT else (self.mean1, self.var1)

    def copy(self) -> Run:
        """An equal run of its own (a plan's copy of a belief moves its runs, not the belief's)."""
        return Run(self.weight, self.mean0, self.mean1, self.var0, self.var1, self.born, self.changes)


def start(prior: Prior) -> Run:
    """A run that starts from ``prior`` (the model's default level, ``UNKNOWN`` wide, where it knows nothing)."""
    return start_at(prior.mean, prior.var)


def start_at(means: tuple[float | None, float | None], variances: tuple[float, float]) -> Run:
    """``start`` of a prior with these means and variances, no ``Prior`` built (a dataclass whose frozen
    ``__init__`` runs as Python and cost more than the rest of a look's new runs)."""
    (m0, m1), (v0, v1) = means, variances
    return Run(
        1.0,
        m0 if m0 is not None else _DEFAULT_TTFT,
        m1 if m1 is not None else _DEFAULT_SPT,
        v0 if m0 is not None else _UNKNOWN2,
        v1 if m1 is not None else _UNKNOWN2,
    )


def first_runs(prior: Prior) -> list[Run]:
    """Where a deployment's first answer is read against: the pooled prior, and beside it, as likely, a level unlike
    its siblings' (``unlike``). The prior's heavy tail: a normal prior read against a Student-t answer takes a first
    answer far from the siblings for one wild answer of a level near them, and moves the level a part of the way."""
    runs = [start(prior)]
    if prior.mean[TTFT] is not None or prior.mean[SPT] is not None:
        runs.append(unlike(prior.mean))
        for run in runs:
            run.weight = 0.5
    return runs


def unlike(means: tuple[float | None, float | None]) -> Run:
    """A level around ``means`` (the siblings') but as unknown as one of a model never measured (``UNKNOWN`` wide):
    a deployment need not resemble the model's others."""
    return start_at(means, (_UNKNOWN2, _UNKNOWN2))


def landings(changed_before: bool, before: tuple[float, float] | None, prior: Prior) -> list[Run]:
    """Where a level that changed may now be, as equally likely runs: anywhere among the model's deployments (the
    pooled prior: a new run of change-point detection starts from the prior, not from the level it left); and,
    once it has changed before (``changed_before``: it has runs), back where it was before that change (``before``:
    a dip's end, a swap back)."""
    if changed_before:  # priced: among its price's or anywhere (``Prior.landing``)
        (m0, v0), (m1, v1) = prior.landing(TTFT), prior.landing(SPT)
        runs = [start_at((m0, m1), (v0, v1))]
    else:
        runs = [start(prior)]
    if changed_before and before is not None:
        runs.append(Run(1.0, before[TTFT], before[SPT], _SPREAD2, _SPREAD2))
    for run in runs:
        run.weight = 1.0 / len(runs)
    return runs


def mix(runs: list[Run], metric: int) -> tuple[float, float]:
    """The runs' mixture: mean and variance of the log level of ``metric``."""
    # Plain loops, not ``sum`` over lists of boxed floats: ``sum`` adds left to right from 0, and ``0 + x`` is
    # ``0.0 + x``, so these are the same floats.
    mean = 0.0
    if metric == TTFT:
        for r in runs:
            mean += r.weight * r.mean0
        var = 0.0
        for r in runs:
            var += r.weight * (r.var0 + math.pow(r.mean0 - mean, 2.0))
        return mean, var
    for r in runs:
        mean += r.weight * r.mean1
    var = 0.0
    for r in runs:
        var += r.weight * (r.var1 + math.pow(r.mean1 - mean, 2.0))
    return mean, var


def heaviest(runs: list[Run]) -> Run:
    """``max(runs, key=weight)`` written out (read several times per answer): the first of the heaviest."""
    best = runs[0]
    top = best.weight
    for run in runs:
        if run.weight > top:
            best, top = run, run.weight
    return best


def prune(runs: list[Run], cut: bool = False) -> list[Run]:
    """The runs with their weights summing to one, the ``RUNS`` heaviest kept (in place where it can be); where every
    weight vanished, the newest run alone. ``cut``: sorted and cut as if more than ``RUNS`` came (runs of weight 0.0
    left unmade: ``unborn_weigh_nothing``)."""
    total = weight_of(runs)
    if total <= 0 or not math.isfinite(total):
        keep = runs[-1]
        keep.weight = 1.0
        return [keep]
    for run in runs:
        run.weight /= total
    if len(runs) > RUNS or cut:
        _heaviest_first(runs)
        del runs[RUNS:]
        total = weight_of(runs)
        for run in runs:
            run.weight /= total
    return runs


def weight_of(runs: list[Run]) -> float:
    """The runs' weights summed: ``sum([r.weight for r in runs])`` written out, the same float (``sum`` adds left to
    right, and its start ``0 + x`` is ``0.0 + x``), no list of boxed floats made."""
    total = 0.0
    for run in runs:
        total += run.weight
    return total


def _heaviest_first(runs: list[Run]) -> None:
    """``runs.sort(key=weight, reverse=True)`` for a few runs, written out: an insertion sort that moves a run only
    before a lighter one, stable as ``sort`` is, so the same order wherever no weight is NaN (``prune`` sorts the
    weights of a finite sum: none is); with a NaN, ``sort`` itself (its order then depends on its algorithm)."""
    for run in runs:
        if run.weight != run.weight:
            runs.sort(key=_WEIGHT, reverse=True)
            return
    for i in range(1, len(runs)):
        run = runs[i]
        weight = run.weight
        j = i
        while j > 0 and runs[j - 1].weight < weight:
            runs[j] = runs[j - 1]
            j -= 1
        runs[j] = run


def unborn_weigh_nothing(
    runs: list[Run],
    before: tuple[float, float] | None,
    noise: list[float],
    hazard: float,
    total: float,
    values: tuple[float | None, float | None],
    prior: Prior,
) -> bool:
    """Whether the runs a change would start on this answer (``Belief._new_runs``) weigh exactly 0.0 after it and are
    then pruned: no chance of a change (``hazard`` 0.0) times the runs' finite ``total`` and a finite likelihood is
    0.0, and the ``RUNS`` runs kept come before them (``prune`` sorts stably). A likelihood is finite where the value,
    the noise (``noise``) and the new run's level are (the prior's landing, the level ``before``); a bound's is
    clipped."""
    if hazard != 0.0 or len(runs) < RUNS or not math.isfinite(total):
        return False
    for metric in METRICS:
        value, scale = values[metric], noise[metric]
        if value is None:
            continue
        mean, var = prior.landing(metric)
        if not (math.isfinite(value) and math.isfinite(scale) and scale > 0.0 and math.isfinite(var) and var >= 0):
            return False
        if (mean is not None and not math.isfinite(mean)) or (before and not math.isfinite(before[metric])):
            return False
    return True
