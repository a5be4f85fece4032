"""Rolling statistics: mergeable histograms per time slice, in memory or in Redis, and the
snapshot the router and the leaderboard read.

``RedisStatsStore`` is imported on first use (``__getattr__``): it imports redis-py (~8 MiB resident),
which a gateway whose stats are in memory never needs."""

from typing import TYPE_CHECKING

from gateway.native import activate

# Before ``sketch`` is imported (compiled where built, ``gateway.native``), whether a process imports routing or stats
# first: a pure ``LogHistogram`` met by compiled routing code would fail its type checks.
activate()

from gateway.stats.base import StatsStore, StoreHealth  # noqa: E402
from gateway.stats.factory import open_stats_store  # noqa: E402
from gateway.stats.memory import InMemoryStatsStore  # noqa: E402
from gateway.stats.sketch import LogHistogram  # noqa: E402
from gateway.stats.snapshot import METRICS, DeploymentSummary, Metric, StatsSnapshot  # noqa: E402

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
