"""When a stream's first token is late enough to start a second attempt beside it (a hedge).

By policy: after a fixed ``hedge_after_s``, past the deployment's own TTFT at ``hedge_quantile``, or, with
``hedge_tail``, only where the first-token tail is heavy (docs/routing.md, "Hedging").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.policies import PolicyConfig
from gateway.stats import LogHistogram, StatsSnapshot
from gateway.stats.sketch import value_of
from gateway.types import DeploymentKey


@dataclass
class TailThresholds:
    """Each deployment's tail threshold, recomputed at most once a second (it walks the histogram)."""

    cached: dict[DeploymentKey, tuple[float, float | None]] = field(default_factory=dict)

    def get(
        self, key: DeploymentKey, histogram: LogHistogram, backup_ttft_s: float, budget: float, now: float
    ) -> float | None:
        entry = self.cached.get(key)
        if entry is not None and now - entry[0] < 1.0:
            return entry[1]
        threshold = tail_threshold(histogram, backup_ttft_s, budget)
        self.cached[key] = (now, threshold)
        return threshold


def hedge_after(
    policy: PolicyConfig,
    snapshot: StatsSnapshot,
    model: str,
    deployment: str,
    backup_ttft_s: float | None,
    tails: TailThresholds,
    now: float,
) -> float | None:
    """When to hedge a candidate (None: never). ``backup_ttft_s``: what starting the next candidate would cost, its
    predicted first token (plus, where it streams slower, the extra stream time)."""
    if policy.hedge_after_s is not None:
        return policy.hedge_after_s
    summary = snapshot.summaries.get((model, deployment))  # ``snapshot.get``, without its Python frame
    histogram = summary.histograms.get("ttft_s") if summary is not None else None
    if policy.hedge_quantile is not None:
        if histogram is None or histogram.count < max(1, policy.min_samples):
            return None
        value = histogram.quantile(policy.hedge_quantile)
        return None if value is None else max(value, policy.hedge_min_after_s)
    if not policy.hedge_tail or histogram is None or backup_ttft_s is None or policy.hedge_budget <= 0:
        return None
    threshold = tails.get((model, deployment), histogram, backup_ttft_s, policy.hedge_budget, now)
    return None if threshold is None else max(threshold, policy.hedge_min_after_s)


def tail_threshold(histogram: LogHistogram, backup_ttft_s: float, budget: float) -> float | None:
    """The earliest threshold, at or past the quantile ``1 - 0.8 × budget`` (so that hedges fit the budget), past
    which waiting on is expected to lose to starting the backup; None before 20 first tokens tell the tail."""
    if histogram.count < 20:
        return None
    first = max(0.5, 1.0 - 0.8 * budget)
    for q in [first] + [q for q in (0.95, 0.98, 0.99) if q > first]:
        threshold = histogram.quantile(q)
        if threshold is not None and mean_excess(histogram, threshold) >= backup_ttft_s:
            return threshold
    return None


def mean_excess(histogram: LogHistogram, threshold: float) -> float:
    """E[value - threshold | value > threshold] over the histogram (0 when nothing is above)."""
    above = excess = 0.0
    for bucket, n in histogram.counts.items():
        value = value_of(bucket)
        if value > threshold:
            above += n
            excess += (value - threshold) * n
    return excess / above if above else 0.0
