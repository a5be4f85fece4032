"""The stats store's series: its backends' health, dropped samples, and the rolling window per deployment.

The window's quantiles, success and cache-hit ratios are exported from a ``StatsSnapshot`` at
scrape time (``observe_snapshot``); a deployment that left the window loses its series.
``WorkerMetrics`` (``gateway.metrics.host``) computes the same families itself under several workers.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from gateway.metrics.family import SeriesFamilies
from gateway.stats.snapshot import DeploymentSummary, Metric, StatsSnapshot
from gateway.types import DeploymentKey

# The rolling-window quantiles exported per deployment, in the label ``q``: ``quantile`` is
# reserved for summaries, and Prometheus (``promtool check metrics``) rejects it on a gauge. For
# tokens per second the low quantiles are the floors DESIGN.md calls "p95"/"p99" (the speed 95% /
# 99% of answers reached).
WINDOW_QUANTILE_LABEL = "q"
WINDOW_QUANTILES: Mapping[Metric, tuple[float, ...]] = {
    "ttft_s": (0.5, 0.95, 0.99),
    "first_answer_s": (0.5, 0.95),
    "tokens_per_s": (0.5, 0.05, 0.01),
    "e2e_s": (0.5, 0.95, 0.99),
}
_WINDOW_NAMES: Mapping[Metric, tuple[str, str]] = {
    "ttft_s": ("gateway_window_ttft_seconds", "TTFT quantile over the stats window"),
    "first_answer_s": ("gateway_window_first_answer_token_seconds", "Time to first answer token over the window"),
    "tokens_per_s": ("gateway_window_tokens_per_second", "Tokens/s quantile over the window (q=0.05: the p95 floor)"),
    "e2e_s": ("gateway_window_end_to_end_seconds", "End-to-end quantile over the stats window"),
}

_WINDOW_LABELS = ("model", "provider", "deployment")


def configured(
    snapshot: StatsSnapshot, providers: Mapping[DeploymentKey, str] | None
) -> list[tuple[DeploymentKey, DeploymentSummary]]:
    """The snapshot's summaries of the deployments ``providers`` holds (all of them without it)."""
    if providers is None:
        return list(snapshot.summaries.items())
    return [(key, summary) for key, summary in snapshot.summaries.items() if key in providers]


class WindowSeries(SeriesFamilies):
    """The stats and bindings backends' health, dropped samples, and the window's gauges (a part of ``Metrics``)."""

    def _register_window_series(self, r: CollectorRegistry) -> None:
        counter, gauge = self.counter_class, self.gauge_class
        # The stats store and its window.
        self.window_hit_ratio = gauge(
            "gateway_window_cache_hit_ratio",
            "Cached / prompt tokens over the window, of answers whose provider reports cached tokens",
            _WINDOW_LABELS,
            registry=r,
        )
        self.stats_healthy = gauge(
            "gateway_stats_backend_healthy",
            "1 when the stats backend is reachable, 0 when degraded",
            ["backend"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.bindings_healthy = gauge(
            "gateway_bindings_backend_healthy",
            "1 when the binding store (response id -> deployment) is reachable, 0 when degraded",
            ["backend"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.samples_dropped_total = counter(
            "gateway_stats_samples_dropped_total", "Samples the stats store could not keep", registry=r
        )
        self.window = {
            metric: gauge(name, doc, [*_WINDOW_LABELS, WINDOW_QUANTILE_LABEL], registry=r)
            for metric, (name, doc) in _WINDOW_NAMES.items()
        }
        self.window_success = gauge(
            "gateway_window_success_ratio", "Successful attempts / attempts over the window", _WINDOW_LABELS, registry=r
        )
        self.window_samples = gauge(
            "gateway_window_samples", "Attempts in the stats window", _WINDOW_LABELS, registry=r
        )
        self._window_series: set[tuple[str, ...]] = set()
        self._dropped_seen = 0

    # -- Hooks: the stats store --------------------------------------------------------------

    def set_bindings_backend(self, backend: str, healthy: bool) -> None:
        self.bindings_healthy.labels(backend).set(1 if healthy else 0)

    def set_stats_backend(self, backend: str, healthy: bool) -> None:
        self.stats_healthy.labels(backend).set(1 if healthy else 0)

    def samples_dropped(self, count: int = 1) -> None:
        """Push form: ``count`` more samples were dropped."""
        self.samples_dropped_total.inc(count)
        self._dropped_seen += count

    def observe_dropped_total(self, total: int) -> None:
        """Pull form: the store's own running total (e.g. ``StoreHealth.dropped_samples``) at scrape time."""
        if total > self._dropped_seen:
            self.samples_dropped_total.inc(total - self._dropped_seen)
            self._dropped_seen = total

    def observe_snapshot(self, snapshot: StatsSnapshot, providers: Mapping[DeploymentKey, str] | None = None) -> None:
        """Export the window's quantiles per deployment; series of deployments gone from it are removed.

        ``providers`` maps (model, deployment) to the provider's name (see ``deployment_providers``): the
        deployments of the config serving now. A deployment it does not hold was removed by a reload, and its
        samples still in the window are not exported. Without it, the deployment's name stands for the provider.
        """
        seen: set[tuple[str, ...]] = set()
        for (model, deployment), summary in configured(snapshot, providers):
            base: tuple[str, ...] = (
                model,
                providers.get((model, deployment), deployment) if providers else deployment,
                deployment,
            )
            self.window_samples.labels(*base).set(summary.samples)
            seen.add(base)
            hit_ratio = summary.hit_ratio()
            if hit_ratio is not None:
                self.window_hit_ratio.labels(*base).set(hit_ratio)
            else:
                self._remove(self.window_hit_ratio, base)
            success = summary.success_rate()
            if success is not None:
                self.window_success.labels(*base).set(success)
            else:
                self._remove(self.window_success, base)
            for metric, quantiles in WINDOW_QUANTILES.items():
                for q in quantiles:
                    value = summary.quantile(metric, q)
                    labels = (*base, f"{q:g}")
                    if value is None:
                        self._remove(self.window[metric], labels)
                    else:
                        self.window[metric].labels(*labels).set(value)
        for gone in self._window_series - seen:
            self._remove(self.window_samples, gone)
            self._remove(self.window_hit_ratio, gone)
            self._remove(self.window_success, gone)
            for metric, quantiles in WINDOW_QUANTILES.items():
                for q in quantiles:
                    self._remove(self.window[metric], (*gone, f"{q:g}"))
        self._window_series = seen
