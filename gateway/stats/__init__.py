"""Rolling statistics: mergeable histograms per time slice, in memory or in Redis, and the
snapshot the router and the leaderboard read.

``RedisStatsStore`` is imported on first use (``__getattr__``): it imports redis-py (~8 MiB resident),
which a gateway whose stats are in memory never needs."""

from typing import TYPE_CHECKING

from gateway.stats.base import StatsStore, StoreHealth
from gateway.stats.factory import open_stats_store
from gateway.stats.memory import InMemoryStatsStore
from gateway.stats.sketch import LogHistogram
from gateway.stats.snapshot import METRICS, DeploymentSummary, Metric, StatsSnapshot

if TYPE_CHECKING:
    from gateway.stats.redis_store import RedisStatsStore


def __getattr__(name: str) -> object:
    if name == "RedisStatsStore":
        from gateway.stats.redis_store import RedisStatsStore

        return RedisStatsStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "METRICS",
    "DeploymentSummary",
    "InMemoryStatsStore",
    "LogHistogram",
    "Metric",
    "RedisStatsStore",
    "StatsSnapshot",
    "StatsStore",
    "StoreHealth",
    "open_stats_store",
]
