"""Rolling statistics: mergeable histograms per time slice, in memory or in Redis, and the
snapshot the router and the leaderboard read."""

from gateway.stats.base import StatsStore, StoreHealth
from gateway.stats.factory import open_stats_store
from gateway.stats.memory import InMemoryStatsStore
from gateway.stats.redis_store import RedisStatsStore
from gateway.stats.sketch import LogHistogram
from gateway.stats.snapshot import METRICS, DeploymentSummary, Metric, StatsSnapshot

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
