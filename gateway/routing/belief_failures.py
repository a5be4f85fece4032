"""A deployment's failure chance, with change points as its levels have.

A provider that fails for a minute and recovers has changed; a fading average would hold the minute against it.
So the chance has run-length hypotheses, each a beta posterior, with a new run from the prior at the hazard's
chance (docs/routing.md, "What the router knows").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.routing.belief_runs import RUNS, finite, heaviest_first

FAIL_PRIOR = (0.2, 1.8)
"""A deployment's failure chance before any attempt: mean 10%, worth two attempts."""


def change_chance(elapsed_s: float, hazard_s: float) -> float:
    """The chance of at least one change in ``elapsed_s`` seconds when changes come once every ``hazard_s``."""
    return 1.0 - math.exp(-elapsed_s / hazard_s)


@dataclass(slots=True)
class FailureRun:
    """One hypothesis: the failure chance has stayed the same since this run began."""

    weight: float
    fails: float
    oks: float

    def __init__(self, weight: float, fails: float, oks: float) -> None:
        # Written out so that mypyc compiles it (as ``belief_runs.Run``).
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
    """Failures heard, faded: how much ``failure_s`` rests on."""
    read: tuple[float, float, float] | None = field(default=None, compare=False)
    """Memo of the last ``counts`` (its time, then the beta): a plan reads it several times at one time."""

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
        heaviest_first(self.runs, [run.weight for run in self.runs])
        runs = self.runs
        while len(runs) > RUNS:  # ``del self.runs[RUNS:]`` without a slice made
            runs.pop()
        total = 0.0
        for run in self.runs:
            total += run.weight
        if total <= 0.0 or not finite(total):
            self.runs = [FailureRun(1.0, a0 + failed, b0 + (not failed))]
            total = 1.0
        for run in self.runs:
            run.weight /= total
        self.failed = self.failed * (1.0 - p) + (1.0 if failed else 0.0)
        self.heard_at = now
        self.read = None

    def recovered(self, now: float) -> None:
        """The circuit breaker saw it fail, then answer its probe: a change it detected, so restart from the prior."""
        self.runs = [FailureRun(1.0, *FAIL_PRIOR)]
        self.heard_at = now
        self.read = None

    def changed(self, now: float, hazard_s: float) -> float:
        """The chance the failure chance has changed since the last attempt was heard."""
        if self.heard_at is None:
            return 0.0
        return change_chance(max(0.0, now - self.heard_at), hazard_s)

    def counts(self, now: float, hazard_s: float) -> tuple[float, float]:
        """The posterior now as one beta (failures, successes), matched by mean and variance to the runs' mixture and
        the prior in the share the hazard gives a change since the last attempt."""
        read = self.read
        if read is not None and read[0] == now:
            return read[1], read[2]
        p = self.changed(now, hazard_s)
        stayed = 1.0 - p
        # Plain loops rather than ``sum`` (no boxed floats when compiled); both add left to right from 0.0.
        mean = 0.0
        for r in self.runs:
            mean += stayed * r.weight * r.fails / (r.fails + r.oks)
        a0, b0 = FAIL_PRIOR
        s0 = a0 + b0  # the prior's, as a run's below
        m0 = a0 / s0
        mean += p * a0 / s0
        var = 0.0
        for r in self.runs:
            a, b = r.fails, r.oks
            s = a + b
            m = a / s
            var += stayed * r.weight * (m * (b / s) / (s + 1) + math.pow(m - mean, 2.0))
        var += p * (m0 * (b0 / s0) / (s0 + 1) + math.pow(m0 - mean, 2.0))
        mean = min(max(mean, 1e-6), 1 - 1e-6)
        n = max(mean * (1 - mean) / max(var, 1e-12) - 1.0, 1e-3)
        self.read = (now, mean * n, (1 - mean) * n)
        return mean * n, (1 - mean) * n
