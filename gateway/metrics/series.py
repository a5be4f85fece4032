"""Prometheus collectors: what the gateway measured, routed and suffered, for Grafana and alerts.

``Metrics`` owns its own ``CollectorRegistry`` (never the process-global one), so two apps in
one process (tests, the demo) never share or collide, and ``create_app`` receives it. It is a
``SampleSink``: every finished attempt's ``Sample`` updates the request counters and the
latency, speed, token and cost series. Everything else arrives through named hooks, listed
under "Hooks" in each group's module, and it implements ``GatewayEvents`` (``gateway.events``):
the router and the relay tell it each routing event directly, on the one road every other
listener shares.

Its series come in groups, one module each, that ``Metrics`` joins: client requests and upstream
attempts (``gateway.metrics.attempts``), routing and provider health (``gateway.metrics.routing``),
the stats store and its window (``gateway.metrics.window``), spend and budgets
(``gateway.admission.spending.metrics``); ``gateway.metrics.family`` holds what they share.

Labels are bounded by the config only: ``model`` (the client-facing name of a configured
model), ``provider``, ``deployment``, and small fixed vocabularies (outcome, reason, state).
Never a key, a user, a prompt or a request id.

Several workers on one port (``gateway serve --workers N``, ``gateway.supervisor``) keep their
counters and histograms in prometheus-client's multiprocess files, and any worker's ``/metrics``
sums them over the host (``gateway.metrics.host``). So each gauge says how workers combine:
``livesum`` for what adds up (requests in flight, capacity), ``livemax``/``livemin`` for states
(a circuit open in any worker; the store healthy in all). ``create_app`` refuses
``PROMETHEUS_MULTIPROC_DIR`` anywhere else: only the supervisor sets it, and wipes it. Usage::

    metrics = Metrics()
    app = create_app(config, AppOptions(metrics=metrics))
    metrics.registry.get_sample_value("gateway_upstream_requests_total", {...})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from gateway import __version__
from gateway.admission.spending.metrics import SpendMetrics
from gateway.config import ConfigError, GatewayConfig
from gateway.metrics.attempts import AttemptSeries
from gateway.metrics.genai import GenAIFamilies
from gateway.metrics.routing import RoutingSeries
from gateway.metrics.window import WindowSeries

WORKER_ENV = "GATEWAY_WORKER_INDEX"
"""Set by ``gateway serve --workers N`` in each worker's environment (its index, 0 … N-1)."""


def check_single_process(environ: Mapping[str, str]) -> None:
    """Refuse prometheus-client's multiprocess mode outside the gateway's own workers."""
    if environ.get("PROMETHEUS_MULTIPROC_DIR") and WORKER_ENV not in environ:
        raise ConfigError(
            "PROMETHEUS_MULTIPROC_DIR is set, but this process is not a worker of `gateway serve --workers N` "
            "(which sets it for its workers, and wipes it at start): unset it, and use --workers to run several "
            "processes on one port"
        )


class Metrics(AttemptSeries, RoutingSeries, WindowSeries):
    """The gateway's collectors, in a registry of their own. Updated from the event loop; scraped from any thread.

    Its series keep plain values (``gateway.metrics.plain``); ``WorkerMetrics`` swaps in
    prometheus-client's own classes, whose values live in the multiprocess files.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, process_metrics: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        if process_metrics:
            ProcessCollector(registry=r)
        build = self.gauge_class(
            "gateway_build_info",
            "The gateway's version (value is always 1)",
            ["version"],
            registry=r,
            multiprocess_mode="max",
        )
        build.labels(__version__).set(1)
        self._register_attempt_series(r)
        self._register_routing_series(r)
        self._register_window_series(r)
        # Spend and budgets by key name and team (``gateway.admission.spending.metrics``).
        self.spend = SpendMetrics(r, self.counter_class)
        self._genai: GenAIFamilies | None = None

    def prepare(self, config: GatewayConfig) -> None:
        """Create, at zero, every series ``config`` bounds: called at start and on each reload.

        A series that appears only with its first event leaves a panel or an alert with *no data*
        on a healthy gateway (no fallback yet, no hedge, no circuit ever opened), which reads as
        "broken" and makes ``rate()`` start from the wrong baseline. So each counter gets its
        (model, provider) × outcome/reason/result series now, each provider its in-flight and
        capacity gauges, and a provider not seen before a closed circuit. A reload that removes a
        provider or a model removes its gauges (circuit, capacity, limits; in flight and queue depth
        once their count drains), which an old runtime's late events do not bring back; its counters
        and histograms stay: a counter must not vanish mid-life.
        """
        self.spend.named = config.server.metrics_key_env is not None
        pairs = dict.fromkeys((m.name, d.provider) for m in config.models for d in m.deployments)
        self._prepare_attempt_series(pairs, config)
        self._prepare_routing_series(pairs, config)

    def genai(self) -> GenAIFamilies:
        """OpenTelemetry's GenAI client histograms (``gateway.metrics.genai``), registered on first use."""
        if self._genai is None:
            self._genai = GenAIFamilies(self.registry)
        return self._genai

    # -- Exposition --------------------------------------------------------------------------

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in the format the scraper asked for (Prometheus text, or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
