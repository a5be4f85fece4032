"""The stats store a config asks for: the one place that knows every backend."""

from __future__ import annotations

import time

from gateway.config import StatsConfig
from gateway.stats.base import StatsStore
from gateway.stats.memory import InMemoryStatsStore
from gateway.stats.redis_store import RedisStatsStore
from gateway.types import Clock


def open_stats_store(config: StatsConfig, wall_clock: Clock = time.time) -> StatsStore:
    """The store the config asks for. Cheap: connections are made in ``start``."""
    if config.backend == "redis":
        return RedisStatsStore(config, wall_clock)
    return InMemoryStatsStore(config, wall_clock)
