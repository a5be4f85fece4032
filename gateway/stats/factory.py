"""The stats store a config asks for: the one place that knows every backend."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gateway.config import StatsConfig
from gateway.stats.base import StatsStore
from gateway.stats.memory import InMemoryStatsStore
from gateway.types import Clock

if TYPE_CHECKING:
    from gateway.redis_client import RedisConnections


def open_stats_store(
    config: StatsConfig, wall_clock: Clock = time.time, redis: RedisConnections | None = None
) -> StatsStore:
    """The store the config asks for. Cheap: connections are made in ``start``, with ``redis``'s
    background client when given (else the store opens and closes its own)."""
    if config.backend == "redis":
        # Imported here: a gateway whose stats are in memory never imports redis-py (~8 MiB resident).
        from gateway.stats.redis_store import RedisStatsStore

        return RedisStatsStore(config, wall_clock, redis)
    return InMemoryStatsStore(config, wall_clock)
