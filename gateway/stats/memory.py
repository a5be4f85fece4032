"""The in-process stats backend: the embedded default, and the one a single replica needs."""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Sequence

from gateway.config import StatsConfig
from gateway.samples import Sample
from gateway.stats.answers import ANSWERS_KEPT, AnswerLog, Recorder
from gateway.stats.base import StoreHealth
from gateway.stats.history import BUCKET_S, History, MinuteBuckets
from gateway.stats.snapshot import StatsSnapshot, sample_buckets
from gateway.stats.window import PENDING_SAMPLES, SlicedWindow
from gateway.types import Clock, DeploymentKey

_NEW = object.__new__


class InMemoryStatsStore:
    """Rolling statistics in this process only. Usage::

    store = InMemoryStatsStore(StatsConfig(window_s=300, slice_s=10))
    store.record(sample)
    store.snapshot().get("llama-3.3-70b", "groq").quantile("ttft_s", 0.95)

    Beside the window, the last answers one by one (``gateway.stats.answers``), tagged ``replica``: a random
    id, as each process has its own. ``as_replica`` gives another replica's store over the same window and
    log, for a simulation of several replicas in one process (``benchmarks/routing_simulate.py``).
    """

    def __init__(self, config: StatsConfig, wall_clock: Clock = time.time, replica: str | None = None) -> None:
        self.config = config
        self.wall_clock = wall_clock
        self.window = SlicedWindow(config.window_s, config.slice_s, wall_clock)
        self.minutes = MinuteBuckets()
        self.answers = AnswerLog()
        self.recorder = Recorder(replica if replica is not None else uuid.uuid4().hex[:16])

    @property
    def replica(self) -> str:
        return self.recorder.replica

    def as_replica(self, replica: str) -> InMemoryStatsStore:
        """Another replica's store sharing this one's window, minutes and log: what it records counts in all
        three, its answers tagged ``replica``."""
        other = InMemoryStatsStore(self.config, self.wall_clock, replica)
        other.window, other.minutes, other.answers = self.window, self.minutes, self.answers
        return other

    def record(self, sample: Sample) -> None:
        buckets = sample_buckets(sample)  # once for both: the bucket indexes are a log per value
        now = self.wall_clock()
        pair = (sample.model, sample.deployment)  # one key for the window, the minutes and the log
        self.window.add(sample, buckets, pair)
        # ``MinuteBuckets.add`` and ``AnswerLog.add``, inline (a frame each per sample): the minute's sample queued
        # for its batch, the answer kept and its mark moved on.
        minutes = self.minutes
        pending = minutes._pending
        pending.append((pair, int(now // BUCKET_S), sample.outcome, buckets))
        if len(pending) >= PENDING_SAMPLES:
            minutes._count_pending()
        answer = self.recorder.answer(sample, now)
        if answer is not None:
            answers = self.answers
            kept = answers.recent.get(pair)
            if kept is None:
                kept = answers.recent[pair] = deque(maxlen=ANSWERS_KEPT)
            kept.append(answer)
            replaced, added = answers.marks.get(pair, (0, 0))
            answers.marks[pair] = (replaced, added + 1)

    async def history(self, pairs: Sequence[DeploymentKey]) -> History:
        return self.minutes.points(self.wall_clock(), pairs)

    def snapshot(self) -> StatsSnapshot:
        """The window's total (``SlicedWindow.snapshot``, shared state: read it before the next ``record``) and the
        answers."""
        window = self.window
        window.expire_aged()
        # ``StatsSnapshot(window.total, self.wall_clock(), self.answers, self.recorder.replica)`` without its
        # generated frozen ``__init__`` (an ``object.__setattr__`` per field): the same fields, set in that order.
        snapshot = _NEW(StatsSnapshot)
        fields = snapshot.__dict__
        fields["summaries"] = window.total
        fields["taken_at"] = self.wall_clock()
        fields["answers"] = self.answers
        fields["replica"] = self.recorder.replica
        return snapshot

    def health(self) -> StoreHealth:
        return StoreHealth()

    async def start(self) -> None:
        pass

    async def sync(self) -> None:
        """Nothing to write or read: every sample already counts (the Redis store's ``sync`` does I/O)."""

    async def aclose(self) -> None:
        pass
