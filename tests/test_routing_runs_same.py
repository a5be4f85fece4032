"""The change tests' runs, kept as side-by-side lists, give what the deque of tuples gave, to the last bit.

``_Run`` kept its latest answers as a deque of (sequence number, log, clipped log, arrival time) tuples, copied into
a list on every test; it now keeps four lists (``seqs``, ``logs``, ``clipped``, ``ats``), with its ``__init__`` and
``_Sums``' written out. ``_FormerRun`` below is the code before (copied); both are fed the same random answers (runs
of every length, spreads that clip and do not, equal arrival times, NaN-free logs of any sign) and every reading
(``shifts``, every ``window``, ``shift_since`` from every sequence number kept and before them) must be equal with
``==`` on floats, not approximately.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

import pytest

from gateway.routing.estimates import WINDOW_ANSWERS, Z_CLIP, _bounded, _Run, _Sums


@dataclass(slots=True)
class _FormerRun:
    total: float = 0.0
    count: int = 0
    latest: deque[tuple[int, float, float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW_ANSWERS + 1))

    def add(self, seq: int, log: float, at: float, sigma: float) -> None:
        clip = Z_CLIP * sigma
        mean = self.total / self.count if self.count else log
        self.total += log
        self.count += 1
        self.latest.append((seq, log, _bounded(log, mean, clip), at))

    def shifts(self, sigma: float) -> list[float]:
        shifts: list[float] = []
        raw = clipped = 0.0
        count, total, latest = self.count, self.total, list(self.latest)
        for length in range(1, len(latest)):
            before = count - length
            if before < 1:
                break
            _, log, bounded, _ = latest[len(latest) - length]
            raw += log
            clipped += bounded
            base = (total - raw) / before
            deviation = (log if length == 1 else clipped) - length * base
            shifts.append(deviation / length / (sigma * math.sqrt(1.0 / length + 1.0 / before)))
        return shifts

    def window(self, index: int) -> tuple[int, float]:
        latest = self.latest
        first = latest[len(latest) - 1 - index]
        return first[0], first[3] - latest[len(latest) - 2 - index][3]

    def shift_since(self, since: int, sigma: float) -> float | None:
        latest = [(seq, log) for seq, log, _, _ in self.latest if seq >= since]
        after = len(latest)
        before = self.count - after
        if after == 0 or before < 1 or (after == len(self.latest) and self.latest[0][0] > since):
            return None
        window = sum(log for _, log in latest)
        base = (self.total - window) / before
        return (window / after - base) / (sigma * math.sqrt(1.0 / after + 1.0 / before))


@pytest.mark.parametrize("seed", range(40))
def test_a_run_reads_what_the_former_run_read(seed: int) -> None:
    rng = random.Random(seed)
    new, old = _Run(), _FormerRun()
    seq, at = rng.randrange(0, 50), rng.uniform(0, 100)
    sigma = rng.choice((0.05, 0.35, 1.2))
    level = rng.gauss(-3, 2)
    for _ in range(rng.randrange(1, 60)):
        seq += rng.choice((1, 1, 1, 2, 5))
        at += rng.choice((0.0, rng.expovariate(5.0), rng.uniform(10, 60)))
        if rng.random() < 0.1:
            level += rng.choice((-2.0, -0.5, 0.5, 2.0))  # a change
        log = level + rng.gauss(0, sigma) * (8.0 if rng.random() < 0.05 else 1.0)  # an outlier now and then
        spread = sigma * rng.uniform(0.5, 2.0)
        new.add(seq, log, at, spread)
        old.add(seq, log, at, spread)
        assert (new.total, new.count, new.latest) == (old.total, old.count, list(old.latest))
        assert len(new.seqs) == len(new.logs) == len(new.clipped) == len(new.ats) <= WINDOW_ANSWERS + 1
        shifts = new.shifts(spread)
        assert repr(shifts) == repr(old.shifts(spread))
        for index in range(len(shifts)):
            assert repr(new.window(index)) == repr(old.window(index))
        for since in range(old.latest[0][0] - 2, seq + 2):
            assert repr(new.shift_since(since, spread)) == repr(old.shift_since(since, spread))


def test_a_run_starts_empty_with_lists_of_its_own() -> None:
    """``_Run``'s written-out ``__init__`` (the dataclass's would be interpreted): empty, and no list shared."""
    first, second = _Run(), _Run()
    assert (first.total, first.count, first.latest) == (0.0, 0, [])
    first.add(1, 0.5, 1.0, 0.35)
    assert (second.seqs, second.logs, second.clipped, second.ats) == ([], [], [], [])
    assert _Run(2.0, 3).total == 2.0 and _Run(2.0, 3).count == 3


def test_sums_start_at_zero() -> None:
    assert _Sums() == _Sums(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
