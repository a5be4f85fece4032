"""A deployment's failure chance, with change points as its levels have.

A provider that fails every request for a minute and then recovers has changed, as a provider whose first token
jumps has; a fading average would hold the minute's failures against it long after. So the failure chance is read
the way the levels are (``gateway.routing.belief``): a few run-length hypotheses ("the chance has been the same since
attempt k"), each a beta posterior, weighted by how well it predicted each outcome, a new run starting from the prior
with the hazard's chance since the last attempt. While nothing is heard the chance it changed grows, so a deployment
that failed long ago reads as the prior again and is worth a look, and once answers come back a few of them are
believed over a long run of failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Final

FAIL_PRIOR = (0.2, 1.8)
"""A deployment's failure chance before any attempt: mean 10%, worth two attempts."""
RUNS: Final = 5
"""Run-length hypotheses kept (the cost of change-point detection, not a knob of the world)."""


def change_chance(elapsed_s: float, hazard_s: float) -> float:
    """The chance of at least one change in ``elapsed_s`` seconds when changes come once every ``hazard_s``."""
    return 1.0 - math.exp(-elapsed_s / hazard_s)


@dataclass(slots=True)
class FailureRun:
    """One hypothesis: the failure chance has stayed the same since this run began (a beta posterior)."""

    weight: float
    fails: float
    oks: float

    def __init__(self, weight: float, fails: float, oks: float) -> None:
        # Written out: compiled, a native method (``belief_runs.Run``); one is made per attempt heard.
        self.weight = weight
        self.fails = fails
        self.oks = oks


@dataclass(slots=True)
class Failures:
    """The failure chance's posterior, and how long failures take to say so."""

    runs: list[FailureRun] = field(default_factory=lambda: [FailureRun(1.0, *FAIL_PRIOR)])
    heard_at: float | None = None
    failure_s: float = 0.0
    """How long its failures took to say so (a running mean): what one costs before the fallback starts."""
    failed: float = 0.0
    """Failures heard (faded as the runs are): how much the running mean of ``failure_s`` rests on."""
    read: tuple[float, float, float] | None = field(default=None, compare=False)
    """The last ``counts`` read (its time, and the beta): a plan reads each deployment's several times at one time.
    A memo, not state: two posteriors are equal whatever each was last read at."""
    terms: list[tuple[float, float, float, float, float]] | None = field(default=None, compare=False, repr=False)
    """Each run's terms of ``counts`` that only an outcome heard changes (None: not found since)."""

    def observe(self, now: float, failed: bool, hazard_s: float, after_s: float | None = None) -> None:
        """One attempt's outcome: failed (after ``after_s``) or answered."""
        if failed and after_s is not None:
            self.failure_s += (after_s - self.failure_s) / min(self.failed + 1.0, 10.0)
        p = self.changed(now, hazard_s)
        a0, b0 = FAIL_PRIOR
        fresh = FailureRun(p * (a0 if failed else b0) / (a0 + b0), a0, b0)
        for run in self.runs:
            run.weight *= (1.0 - p) * (run.fails if failed else run.oks) / (run.fails + run.oks)
        self.runs.append(fresh)
        for run in self.runs:
            run.fails += 1.0 if failed else 0.0
            run.oks += 0.0 if failed else 1.0
        _heaviest_first(self.runs)
        del self.runs[RUNS:]
        total = 0.0  # ``sum`` of the weights written out: the same float (left to right, ``0 + x`` is ``0.0 + x``)
        for run in self.runs:
            total += run.weight
        if total <= 0.0 or not math.isfinite(total):
            self.runs = [FailureRun(1.0, a0 + failed, b0 + (not failed))]
            total = 1.0
        for run in self.runs:
            run.weight /= total
        self.failed = self.failed * (1.0 - p) + (1.0 if failed else 0.0)
        self.heard_at = now
        self.read = self.terms = None

    def recovered(self, now: float) -> None:
        """The circuit breaker saw it fail and then answer its probe: a change point it detected, so the failure
        chance starts again from the prior (a change-point test on failures alone needs a few answers to say so)."""
        self.runs = [FailureRun(1.0, *FAIL_PRIOR)]
        self.heard_at = now
        self.read = self.terms = None

    def changed(self, now: float, hazard_s: float) -> float:
        """The chance the failure chance has changed since the last attempt was heard."""
        if self.heard_at is None:
            return 0.0
        return change_chance(max(0.0, now - self.heard_at), hazard_s)

    def counts(self, now: float, hazard_s: float) -> tuple[float, float]:
        """The posterior now as one beta (failures, successes): the runs' mixture, and the prior in the share the
        hazard gives a change since the last attempt, matched by mean and variance.

        Each run's beta terms (its mean and variance) change only when an outcome is heard, so they are found then
        (``_terms``), not on every read; what ``now`` moves (the hazard's share) is weighed here, with the same
        arithmetic in the same order as the plain sums over every part."""
        read = self.read
        if read is not None and read[0] == now:
            return read[1], read[2]
        heard = self.heard_at
        p = 0.0 if heard is None else 1.0 - math.exp(-max(0.0, now - heard) / hazard_s)
        terms = self.terms if self.terms is not None else self._terms()
        stayed = 1.0 - p
        # Plain loops, not ``sum`` over lists (read at every plan: compiled, each list's float is boxed): ``sum`` of
        # floats adds left to right from 0, and ``0 + x`` is ``0.0 + x``, so these are the same floats.
        mean = 0.0
        for t in terms:
            mean += stayed * t[0] * t[1] / t[2]
        mean += p * _A0 / _S0
        var = 0.0
        for t in terms:
            var += stayed * t[0] * (t[4] + math.pow(t[3] - mean, 2.0))
        var += p * (_V0 + math.pow(_M0 - mean, 2.0))
        mean = min(max(mean, 1e-6), 1 - 1e-6)
        n = max(mean * (1 - mean) / max(var, 1e-12) - 1.0, 1e-3)
        self.read = (now, mean * n, (1 - mean) * n)
        return mean * n, (1 - mean) * n

    def _terms(self) -> list[tuple[float, float, float, float, float]]:
        """Per run: its weight, ``a``, ``a + b``, its mean ``a / (a + b)`` and its beta's variance (``counts``)."""
        terms = []
        for r in self.runs:
            a, b = r.fails, r.oks
            s = a + b
            m = a / s
            terms.append((r.weight, a, s, m, m * (b / s) / (s + 1)))
        self.terms = terms
        return terms


def _heaviest_first(runs: list[FailureRun]) -> None:
    """``runs.sort(key=weight, reverse=True)`` written out (``belief_runs._heaviest_first``: an insertion sort, stable
    as ``sort`` is, the same order wherever no weight is NaN; ``sort`` itself where one is)."""
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


_WEIGHT = attrgetter("weight")
_A0, _B0 = FAIL_PRIOR
_S0: Final = _A0 + _B0
_M0: Final = _A0 / _S0
_V0: Final = _M0 * (_B0 / _S0) / (_S0 + 1)
