"""The in-process stats backend: the embedded default, and the one a single replica needs."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.config import StatsConfig
from gateway.samples import Sample
from gateway.stats.base import StoreHealth
from gateway.stats.history import History, MinuteBuckets
from gateway.stats.snapshot import StatsSnapshot, sample_buckets
from gateway.stats.window import SlicedWindow
from gateway.types import Clock, DeploymentKey


class InMemoryStatsStore:
    """Rolling statistics in this process only. Usage::

    store = InMemoryStatsStore(StatsConfig(window_s=300, slice_s=10))
    store.record(sample)
    store.snapshot().get("llama-3.3-70b", "groq").quantile("ttft_s", 0.95)
    """

    def __init__(self, config: StatsConfig, wall_clock: Clock = time.time) -> None:
        self.config = config
        self.wall_clock = wall_clock
        self.window = SlicedWindow(config.window_s, config.slice_s, wall_clock)
        self.minutes = MinuteBuckets()

    def record(self, sample: Sample) -> None:
        buckets = sample_buckets(sample)  # once for both: the bucket indexes are a log per value
        self.window.add(sample, buckets)
        self.minutes.add(sample, self.wall_clock(), buckets)

    async def history(self, pairs: Sequence[DeploymentKey]) -> History:
        return self.minutes.points(self.wall_clock(), pairs)

    def snapshot(self) -> StatsSnapshot:
        return self.window.snapshot()

    def health(self) -> StoreHealth:
        return StoreHealth()

    async def start(self) -> None:
        pass

    async def sync(self) -> None:
        """Nothing to write or read: every sample already counts (the Redis store's ``sync`` does I/O)."""

    async def aclose(self) -> None:
        pass
