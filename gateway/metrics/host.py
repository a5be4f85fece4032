"""The metrics of one worker among several on a host, and the scrape that sums them all.

Under ``gateway serve --workers N`` every worker records into prometheus-client's multiprocess
files (``PROMETHEUS_MULTIPROC_DIR``, set and wiped by the supervisor): each counter, histogram and
gauge value lives in a file of its process. A scrape of any worker builds a fresh registry with a
``MultiProcessCollector`` over that directory, so it returns the whole host's counts once: a
counter of a worker that died still counts (its file stays), a gauge of a dead worker does not
(``live*`` modes, and the supervisor's ``mark_process_dead``).

Two kinds of series cannot live in those files. The rolling window's quantiles are computed from a
stats snapshot at scrape time, and a series of a deployment that left the window must vanish:
here they come from the scraping worker's own snapshot (the whole host's with ``backend = "redis"``,
that worker's samples with the memory backend). And process metrics (CPU, memory) describe one
process: they are not exported in this mode. Usage (the worker does this)::

    metrics = WorkerMetrics(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    app = create_app(config, AppOptions(metrics=metrics))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric as MetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample

from gateway.metrics.series import Metrics
from gateway.metrics.window import _WINDOW_LABELS, _WINDOW_NAMES, WINDOW_QUANTILE_LABEL, WINDOW_QUANTILES, configured
from gateway.stats.snapshot import StatsSnapshot
from gateway.types import DeploymentKey

_DRAINING = frozenset({"gateway_inflight_requests", "gateway_queue_depth"})
"""Gauges that count work: a removed provider's or model's stays until the old runtime's work is done."""
_SUCCESS = ("gateway_window_success_ratio", "Successful attempts / attempts over the window")
_SAMPLES = ("gateway_window_samples", "Attempts in the stats window")


class _WindowCollector:
    """Yields the window gauges as last computed (``WorkerMetrics.observe_snapshot``)."""

    def __init__(self, families: list[MetricFamily]) -> None:
        self.families = families

    def collect(self) -> Iterable[MetricFamily]:
        return self.families


class _CurrentGauges:
    """The multiprocess files' families, less the gauge series of providers and models no longer configured.

    A file cannot forget a series: a gauge a reload removed (``RoutingSeries._retire``) would stay in every
    worker's file, a removed provider's open circuit with it, for as long as the workers live. So the scrape
    drops them, as a single process's registry does: the gauges of a name the config (``live``: providers,
    models) no longer has go, a count still draining (in flight, queued) once it is 0. Counters and
    histograms stay whole: a counter must not vanish mid-life.
    """

    def __init__(self, files: MultiProcessCollector, live: tuple[frozenset[str], frozenset[str]] | None) -> None:
        self.files = files
        self.live = live

    def collect(self) -> Iterable[MetricFamily]:
        for family in self.files.collect():  # type: ignore[no-untyped-call]
            if family.type == "gauge" and self.live is not None:
                family.samples = [s for s in family.samples if _current(family.name, s, self.live)]
            yield family


def _current(name: str, sample: Sample, live: tuple[frozenset[str], frozenset[str]]) -> bool:
    """A gauge sample names only configured providers and models (or is a removed one's count still draining)."""
    providers, models = live
    provider, model = sample.labels.get("provider"), sample.labels.get("model")
    if (provider is None or provider in providers) and (model is None or model in models):
        return True
    return name in _DRAINING and sample.value > 0


class WorkerMetrics(Metrics):
    """``Metrics`` for one of several workers: see the module docstring. ``render`` is the host's scrape."""

    # prometheus-client's own classes: only their values are written to the multiprocess files.
    counter_class = Counter
    histogram_class = Histogram
    gauge_class = Gauge

    def __init__(self, directory: str) -> None:
        super().__init__(process_metrics=False)
        self.directory = directory
        self._window: list[MetricFamily] = []

    def observe_snapshot(self, snapshot: StatsSnapshot, providers: Mapping[DeploymentKey, str] | None = None) -> None:
        """Compute the window's series now, on the event loop; ``render`` (in a thread) only reads them."""
        self._window = list(_window_families(snapshot, providers))

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        registry = CollectorRegistry(auto_describe=False)
        files = MultiProcessCollector(None, path=self.directory)  # type: ignore[no-untyped-call]
        registry.register(_CurrentGauges(files, self._live))
        registry.register(_WindowCollector(self._window))
        encoder, content_type = choose_encoder(accept or "")
        return encoder(registry), content_type


def _window_families(snapshot: StatsSnapshot, providers: Mapping[DeploymentKey, str] | None) -> Iterator[MetricFamily]:
    quantile_labels = [*_WINDOW_LABELS, WINDOW_QUANTILE_LABEL]
    families = {
        metric: GaugeMetricFamily(name, doc, labels=quantile_labels) for metric, (name, doc) in _WINDOW_NAMES.items()
    }
    success = GaugeMetricFamily(*_SUCCESS, labels=list(_WINDOW_LABELS))
    samples = GaugeMetricFamily(*_SAMPLES, labels=list(_WINDOW_LABELS))
    for (model, deployment), summary in configured(snapshot, providers):
        base = [model, providers.get((model, deployment), deployment) if providers else deployment, deployment]
        samples.add_metric(base, summary.samples)
        rate = summary.success_rate()
        if rate is not None:
            success.add_metric(base, rate)
        for metric, quantiles in WINDOW_QUANTILES.items():
            for q in quantiles:
                value = summary.quantile(metric, q)
                if value is not None:
                    families[metric].add_metric([*base, f"{q:g}"], value)
    yield from families.values()
    yield success
    yield samples


__all__ = ["WorkerMetrics"]
