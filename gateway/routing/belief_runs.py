"""A belief's run-length hypotheses: "the level has stayed the same since this run began".

Each run holds a normal posterior on the log level and a weight; a belief keeps at most ``RUNS``. This module
holds what is done to the list as a whole: where new runs start, their mixture, and pruning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final, TypeVar

from gateway.routing.priors import SPREAD, Prior

RUNS: Final = 5
"""Run-length hypotheses kept per deployment: a cost of the computation, not a fact of the world."""
TTFT: Final = 0
SPT: Final = 1
METRICS = (TTFT, SPT)
DEFAULT_LEVEL = (math.log(1.0), math.log(1 / 50.0))
"""Where a model with nothing measured starts: 1 s to first token, 50 tokens/s."""
UNKNOWN: Final = 3.0
"""How far (log sd) a model's first token and speed may lie from ``DEFAULT_LEVEL`` before anything is measured."""
T = TypeVar("T")


def finite(x: float) -> bool:
    """``math.isfinite(x)`` of a float, the same answer (NaN and ±inf compare false). Compiled, this is two native
    comparisons; ``math.isfinite`` is no mypyc primitive: a call looked up on the module, of a boxed float."""
    return -math.inf < x < math.inf


@dataclass(slots=True)
class Run:
    """One hypothesis: the level has stayed the same since ``born``. Its posterior is four float fields (``0`` the
    first token, ``1`` seconds per token) because compiled code keeps a field as a native double."""

    weight: float
    mean0: float
    mean1: float
    var0: float
    var1: float
    born: float = 0.0
    changes: float = 0.0
    """The changes expected before it, its own birth included, if it is the true one (``belief_hazard``)."""
    square0: float = field(default=0.0, init=False, compare=False, repr=False)
    """Scratch, not state: the answer's squared residual ``(value − mean0)²`` while one answer is heard, found once
    by ``student.likelihoods`` (or ``student.residuals``) for its t density, the scatters' weighing and the Kalman
    step, which all read it against the same mean."""
    square1: float = field(default=0.0, init=False, compare=False, repr=False)
    """``square0`` of seconds per token."""
    fit: float = field(default=0.0, init=False, compare=False, repr=False)
    """Scratch, not state: how well it predicted the answer being heard (``student.likelihoods``)."""
    chance: float = field(default=0.0, init=False, compare=False, repr=False)
    """Scratch, not state: its chance before the answer being heard, which the scatters marginalise over
    (``Belief.observe``, ``belief_scatter._weigh``). Fields rather than lists: no float boxed per run."""

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
        # Written out so that mypyc compiles it; the generated ``__init__`` stays interpreted.
        self.weight = weight
        self.mean0 = mean0
        self.mean1 = mean1
        self.var0 = var0
        self.var1 = var1
        self.born = born
        self.changes = changes
        self.square0 = 0.0
        self.square1 = 0.0
        self.fit = 0.0
        self.chance = 0.0

    def copy(self) -> Run:
        """An equal run of its own."""
        return Run(self.weight, self.mean0, self.mean1, self.var0, self.var1, self.born, self.changes)


def start_at(m0: float | None, m1: float | None, v0: float, v1: float) -> Run:
    """A run at the log level's means and variances (a mean None: ``DEFAULT_LEVEL``, ``UNKNOWN`` wide)."""
    return Run(
        1.0,
        m0 if m0 is not None else DEFAULT_LEVEL[TTFT],
        m1 if m1 is not None else DEFAULT_LEVEL[SPT],
        v0 if m0 is not None else UNKNOWN**2,
        v1 if m1 is not None else UNKNOWN**2,
    )


def first_runs(prior: Prior) -> list[Run]:
    """The runs a first answer is read against: the pooled prior and, as likely, a level unlike the siblings'. This
    heavy tail lets a first answer far from the siblings be believed rather than read as a wild one."""
    (m0, m1), (v0, v1) = prior.mean, prior.var
    runs = [start_at(m0, m1, v0, v1)]
    if m0 is not None or m1 is not None:
        runs.append(start_at(m0, m1, UNKNOWN**2, UNKNOWN**2))  # a deployment need not resemble the others
        for run in runs:
            run.weight = 0.5
    return runs


def landings(changed_before: bool, before: tuple[float, float] | None, prior: Prior) -> list[Run]:
    """Where a level that changed may now be, as equally likely runs: among the model's deployments (the prior) and,
    once it has runs, back at the level ``before`` its last change."""
    if not changed_before:
        (m0, m1), (v0, v1) = prior.mean, prior.var
        return [start_at(m0, m1, v0, v1)]
    m0, v0 = prior.landing(TTFT)
    m1, v1 = prior.landing(SPT)
    run = start_at(m0, m1, v0, v1)
    if before is None:
        return [run]
    run.weight = 0.5  # ``1.0 / len(runs)`` of two, exactly
    return [run, Run(0.5, before[TTFT], before[SPT], SPREAD**2, SPREAD**2)]


def mix(runs: list[Run], metric: int) -> tuple[float, float]:
    """The runs' mixture: mean and variance of the log level of ``metric``."""
    # Plain loops rather than ``sum`` (no boxed floats when compiled); both add left to right from 0.0.
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
    """``max(runs, key=weight)`` written out: the first of the heaviest."""
    best = runs[0]
    top = best.weight
    for run in runs:
        if run.weight > top:
            best, top = run, run.weight
    return best


def prune(runs: list[Run], cut: bool = False) -> list[Run]:
    """Normalise the weights and keep the ``RUNS`` heaviest (in place where it can); where every weight vanished, the
    newest run alone. ``cut``: sort and cut even with ``RUNS`` or fewer (``unborn_weigh_nothing``)."""
    total = weight_of(runs)
    if total <= 0 or not finite(total):
        keep = runs[-1]
        keep.weight = 1.0
        return [keep]
    for run in runs:
        run.weight /= total
    if len(runs) > RUNS or cut:
        heaviest_first(runs, [run.weight for run in runs])
        while len(runs) > RUNS:  # ``del runs[RUNS:]`` without a slice made
            runs.pop()
        total = weight_of(runs)
        for run in runs:
            run.weight /= total
    return runs


def weight_of(runs: list[Run]) -> float:
    """``sum(r.weight for r in runs)`` written out: the same float, no boxed floats."""
    total = 0.0
    for run in runs:
        total += run.weight
    return total


def heaviest_first(items: list[T], weights: list[float]) -> None:
    """``items.sort(key=weight, reverse=True)`` given each item's weight in ``weights`` (the same order), both sorted
    in place: a stable insertion sort for the few hypotheses a belief keeps (runs, scatters, failure runs), without a
    key function's calls; with a NaN weight, ``sort``'s own order (the same permutation, found on the weights).
    The weights come as a float list the caller makes from its own typed list: compiled, reading ``weight`` there is
    a native read, where a generic one here would look it up by name."""
    for weight in weights:
        if weight != weight:
            order = sorted(range(len(items)), key=weights.__getitem__, reverse=True)
            items[:] = [items[i] for i in order]
            weights[:] = [weights[i] for i in order]
            return
    for i in range(1, len(items)):
        item = items[i]
        weight = weights[i]
        j = i
        while j > 0 and weights[j - 1] < weight:
            items[j] = items[j - 1]
            weights[j] = weights[j - 1]
            j -= 1
        items[j] = item
        weights[j] = weight


def unborn_weigh_nothing(
    runs: list[Run],
    before: tuple[float, float] | None,
    noise: list[float],
    hazard: float,
    total: float,
    values: tuple[float | None, ...],
    prior: Prior,
) -> bool:
    """Whether the runs a change would start now would weigh exactly 0.0 and be pruned, so need not be made: the
    chance of a change is 0.0, ``RUNS`` runs are kept already, and every factor of their weight is finite."""
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
