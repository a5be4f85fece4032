"""The stats store a config asks for: the one place that knows every backend."""

from __future__ import annotations

import time

from gateway.config import StatsConfig
from gateway.redis_client import RedisConnections
from gateway.stats.base import StatsStore
from gateway.stats.memory import InMemoryStatsStore
from gateway.stats.redis_store import RedisStatsStore
from gateway.types import Clock


def open_stats_store(
    config: StatsConfig, wall_clock: Clock = time.time, redis: RedisConnections | None = None
) -> StatsStore:
    """The store the config asks for. Cheap: connections are made in ``start``, with ``redis``'s
    background client when given (else the store opens and closes its own)."""
    if config.backend == "redis":
        return RedisStatsStore(config, wall_clock, redis)
    return InMemoryStatsStore(config, wall_clock)
