"""Rolling statistics: mergeable histograms per time slice, in memory or in Redis, and the
snapshot the router and the leaderboard read."""

from gateway.stats.sketch import LogHistogram
from gateway.stats.snapshot import METRICS, DeploymentSummary, Metric, StatsSnapshot

__all__ = ["METRICS", "DeploymentSummary", "LogHistogram", "Metric", "StatsSnapshot"]
