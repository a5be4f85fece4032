"""What ``gateway bench`` shows while it runs: requests done, errors, and where each target stands.

Why: a benchmark of slow providers runs for minutes, and a silent terminal looks hung. On a
terminal, a bar on one line is redrawn as requests finish; on a terminal or not (CI logs, a
pipe), a line every ``every_s`` seconds says how far each target got, with its errors and its
requests in flight, so a stuck provider shows by name.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from gateway.bench.runner import BenchTarget, RequestResult
from gateway.types import Clock

REPORT_EVERY_S = 10.0


def _clock_text(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def _errors(count: int) -> str:
    return f"{count} error{'' if count == 1 else 's'}"


class BenchProgress:
    """Counts per target; ``started``/``finished`` are the runner's hooks, ``report_while`` prints the lines.

    Not thread-safe: fed and read on the benchmark's event loop.
    """

    WIDTH = 30

    def __init__(
        self,
        targets: Sequence[BenchTarget],
        requests_per_target: int,
        stream: TextIO = sys.stderr,
        *,
        every_s: float = REPORT_EVERY_S,
        clock: Clock = time.monotonic,
    ) -> None:
        self.names = [t.name for t in targets]
        self.per_target = requests_per_target
        self.total = max(1, len(self.names) * requests_per_target)
        self.stream = stream
        self.every_s = every_s
        self.clock = clock
        self.bar = stream.isatty()
        self.began = clock()
        self.sent: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()

    def started(self, target: BenchTarget) -> None:
        self.sent[target.name] += 1

    def finished(self, result: RequestResult) -> None:
        self.done[result.target] += 1
        self.failed[result.target] += result.outcome != "ok"
        if self.bar:
            self._draw_bar()

    def totals(self) -> str:
        done, failed = sum(self.done.values()), sum(self.failed.values())
        return f"{done}/{self.total} requests done, {_errors(failed)}"

    def line(self) -> str:
        """Elapsed time, totals, then each target: done of N, errors, in flight."""
        parts = []
        for name in self.names:
            part = f"{name} {self.done[name]}/{self.per_target}"
            notes = []
            if self.failed[name]:
                notes.append(_errors(self.failed[name]))
            in_flight = max(0, self.sent[name] - self.done[name])
            if in_flight:
                notes.append(f"{in_flight} in flight")
            parts.append(part + (f" ({', '.join(notes)})" if notes else ""))
        return f"[{_clock_text(self.clock() - self.began)}] {self.totals()} | " + " | ".join(parts)

    def report(self) -> None:
        self.stream.write(("\r\x1b[K" if self.bar else "") + self.line() + "\n")
        self.stream.flush()
        if self.bar:
            self._draw_bar()

    async def report_while(self, work: asyncio.Future[object] | asyncio.Task[object]) -> None:
        """Print ``line()`` every ``every_s`` until ``work`` is done."""
        while not work.done():
            await asyncio.wait([work], timeout=self.every_s)
            if not work.done():
                self.report()

    def _draw_bar(self) -> None:
        done = sum(self.done.values())
        filled = self.WIDTH * done // self.total
        failed = sum(self.failed.values())
        errors = f", {_errors(failed)}" if failed else ""
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{self.total} requests{errors}  "
            f"{_clock_text(self.clock() - self.began)}"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.bar:
            self.stream.write("\n")
            self.stream.flush()
