"""Prometheus collectors: what the gateway measured, routed and suffered, for Grafana and alerts.

``Metrics`` owns its own ``CollectorRegistry`` (never the process-global one), so two apps in
one process (tests, the demo) never share or collide, and ``create_app`` receives it. It is a
``SampleSink``: every finished attempt's ``Sample`` updates the request counters and the
latency, speed, token and cost series. Everything else arrives through named hooks, listed
under "Hooks" below, and it implements ``GatewayEvents`` (``gateway.events``): the router and the relay
tell it each routing event directly, on the one road every other listener shares.

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
from typing import Any, Literal, TypeVar, cast, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder

from gateway import __version__
from gateway.admission.spending.metrics import SpendMetrics
from gateway.config import ConfigError, GatewayConfig
from gateway.metrics.genai import GenAIFamilies
from gateway.metrics.plain import PlainCounter, PlainGauge, PlainHistogram
from gateway.routing.capacity import ProviderLimit
from gateway.samples import VALIDITIES, Outcome, Sample
from gateway.stats.snapshot import Metric, StatsSnapshot
from gateway.types import (
    AFFINITY_CHOICES,
    CIRCUIT_STATES,
    MOVE_REASONS,
    AffinityChoice,
    BreakResult,
    CircuitState,
    DeploymentKey,
    HedgeResult,
    QueueOutcome,
    RouteReason,
)

_Family = TypeVar("_Family", Counter, Gauge, Histogram)

OverheadMode = Literal["stream", "full"]
"""``stream``: added to the client's time to first token; ``full``: added to a whole JSON answer."""

# Bucket bounds resolve what real providers do (gateway/fakes/provider-profiles.csv): first tokens
# from tens of milliseconds to a minute, whole answers up to the ten-minute default deadline, and
# speeds from a crawling 1 token/s to well past the fastest inference hardware's thousands (a
# local mock or a cached answer streams tens of thousands of tokens/s: they must not all pile
# into the +Inf bucket).
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0)
E2E_BUCKETS = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
)
TPS_BUCKETS = (
    1, 2, 5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000,
    7500, 10_000, 15_000, 20_000, 30_000, 50_000, 100_000,
)  # fmt: skip
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)
OUTPUT_TOKEN_BUCKETS = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

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

STATUS_CLASSES = ("2xx", "4xx", "5xx", "cancelled")
"""What ``status_class`` can answer for a request that reached a provider."""
HEDGE_RESULTS: tuple[HedgeResult, ...] = get_args(HedgeResult)
BREAK_RESULTS: tuple[BreakResult, ...] = get_args(BreakResult)

_SAMPLE_LABELS = ("model", "provider")
_WINDOW_LABELS = ("model", "provider", "deployment")


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


def deployment_providers(config: GatewayConfig) -> dict[DeploymentKey, str]:
    """(model, deployment) → provider name, for labelling the window gauges."""
    return {(m.name, d.name): d.provider for m in config.models for d in m.deployments}


def status_class(status: int | None) -> str:
    """``2xx``/``4xx``/``5xx``, or ``cancelled`` when no response was started (the client left)."""
    return "cancelled" if status is None else f"{status // 100}xx"


class Metrics:
    """The gateway's collectors, in a registry of their own. Updated from the event loop; scraped from any thread.

    Its series keep plain values (``gateway.metrics.plain``); ``WorkerMetrics`` swaps in
    prometheus-client's own classes, whose values live in the multiprocess files.
    """

    counter_class: type[Counter] = PlainCounter
    histogram_class: type[Histogram] = PlainHistogram
    gauge_class: type[Gauge] = PlainGauge

    def __init__(self, registry: CollectorRegistry | None = None, *, process_metrics: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        counter, histogram, gauge = self.counter_class, self.histogram_class, self.gauge_class
        if process_metrics:
            ProcessCollector(registry=r)
        build = gauge(
            "gateway_build_info",
            "The gateway's version (value is always 1)",
            ["version"],
            registry=r,
            multiprocess_mode="max",
        )
        build.labels(__version__).set(1)

        # Client requests, one per HTTP request to an inference endpoint.
        self.requests = counter(
            "gateway_requests_total",
            "Client requests answered, by model, the provider that answered, and HTTP status class",
            ["model", "provider", "status_class"],
            registry=r,
        )
        self.overhead = histogram(
            "gateway_overhead_seconds",
            "Time the gateway itself added: client-seen latency minus time waiting on upstreams",
            ["mode"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        # Upstream attempts, one per Sample.
        self.attempts = counter(
            "gateway_upstream_requests_total",
            "Upstream attempts by outcome (ok, upstream_error, timeout, broken_stream, client_cancelled, client_error)",
            [*_SAMPLE_LABELS, "outcome"],
            registry=r,
        )
        self.ttft = histogram(
            "gateway_ttft_seconds",
            "Upstream request sent to first output-bearing chunk",
            _SAMPLE_LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.first_answer = histogram(
            "gateway_time_to_first_answer_token_seconds",
            "Upstream request sent to first visible answer token (reasoning excluded)",
            _SAMPLE_LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tokens_per_second = histogram(
            "gateway_tokens_per_second",
            "Answer tokens / (last answer token - first answer token), pinned tokenizer",
            _SAMPLE_LABELS,
            buckets=TPS_BUCKETS,
            registry=r,
        )
        self.end_to_end = histogram(
            "gateway_end_to_end_seconds",
            "Client request received to last byte sent, complete answers only",
            _SAMPLE_LABELS,
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.output_tokens_per_answer = histogram(
            "gateway_output_tokens_per_answer",
            "Answer length in tokens (pinned tokenizer), complete answers only",
            _SAMPLE_LABELS,
            buckets=OUTPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.tokens = counter(
            "gateway_tokens_total",
            "Tokens by type: input (provider usage, else the gateway's estimate), output (pinned tokenizer)",
            [*_SAMPLE_LABELS, "type"],
            registry=r,
        )
        self.cost = counter("gateway_cost_usd_total", "Cost in USD at configured prices", _SAMPLE_LABELS, registry=r)
        self.inflight = gauge(
            "gateway_inflight_requests",
            "Upstream attempts in flight, per provider",
            ["provider"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.capacity = gauge(
            "gateway_provider_max_concurrency",
            "The provider's configured max_concurrency (per worker, summed over the workers of a host)",
            ["provider"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.concurrency_limit = gauge(
            "gateway_provider_concurrency_limit",
            "Requests in flight the gateway allows the provider now: its learned limit, under max_concurrency",
            ["provider"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.ratelimit_remaining = gauge(
            "gateway_provider_ratelimit_remaining",
            "What the provider's rate-limit headers last said it has left (kind: requests or tokens)",
            ["provider", "kind"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.ratelimit_reset = gauge(
            "gateway_provider_ratelimit_reset_seconds",
            "Seconds until the provider's reported rate-limit budget resets (0: reset, or never reported)",
            ["provider"],
            registry=r,
            multiprocess_mode="livemax",
        )
        # Waiting for a slot when every deployment is full.
        self.queue_depth = gauge(
            "gateway_queue_depth",
            "Requests waiting for a free slot, per model",
            ["model"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_wait = histogram(
            "gateway_queue_wait_seconds",
            "How long requests waited for a free slot (served or not)",
            ["model"],
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.queue_refusals = counter(
            "gateway_queue_refusals_total",
            "Requests refused for want of a slot, by reason (timeout: waited too long; full: the line was full)",
            ["model", "reason"],
            registry=r,
        )
        # Routing.
        self.route_decisions = counter(
            "gateway_routing_decisions_total",
            "Requests committed to a provider, by the reason it was chosen",
            [*_SAMPLE_LABELS, "reason"],
            registry=r,
        )
        self.fallbacks = counter(
            "gateway_fallbacks_total", "Failed attempts followed by another attempt", _SAMPLE_LABELS, registry=r
        )
        self.hedges = counter(
            "gateway_hedges_total", "Hedged attempts by result (won, lost)", [*_SAMPLE_LABELS, "result"], registry=r
        )
        self.race_loser_seconds = counter(
            "gateway_race_loser_seconds_total",
            "Seconds race and hedge losers held their slots (cancelled or drained attempts beside the answer)",
            _SAMPLE_LABELS,
            registry=r,
        )
        self.race_loser_cost = counter(
            "gateway_race_loser_cost_usd_total",
            "What race and hedge losers cost (their prompts, and the tokens a drained loser read)",
            _SAMPLE_LABELS,
            registry=r,
        )
        self.stream_breaks = counter(
            "gateway_stream_breaks_total",
            "Streams whose upstream failed after part of the answer reached the client, by what followed "
            "(recovered: another deployment finished the answer; failed: the stream ended with an error event)",
            [*_SAMPLE_LABELS, "result"],
            registry=r,
        )
        self.invalid_answers = counter(
            "gateway_invalid_answers_total",
            "Complete answers judged invalid (gateway.quality), by reason: tool_args_not_json, tool_args_schema, "
            "json_invalid, json_schema, empty, truncated, degenerate, wrong_stop",
            ["model", "deployment", "reason"],
            registry=r,
        )
        self.malformed_events = counter(
            "gateway_malformed_events_total",
            "Streams that completed although one of their events was not valid JSON (the client skipped it): "
            "counted here, not against the provider's health",
            _SAMPLE_LABELS,
            registry=r,
        )
        self.circuit = gauge(
            "gateway_circuit_state",
            "1 for the provider's current circuit state, 0 otherwise",
            ["provider", "state"],
            registry=r,
            multiprocess_mode="livemax",
        )
        # Sessions and prompt caches.
        self.session_routes = counter(
            "gateway_session_routes_total",
            "Requests of a session by what routing did with it: stay (where its prompt is cached), move (reason: "
            "slower, unavailable, excluded), new (bound nowhere yet), unknown (binding unreadable), off",
            ["model", "choice", "reason"],
            registry=r,
        )
        self.session_bindings = counter(
            "gateway_session_bindings_total",
            "Session bindings written (after an answer completed), by the deployment bound",
            ["model", "deployment"],
            registry=r,
        )
        self.cached_tokens = counter(
            "gateway_cached_tokens_total",
            "Prompt tokens the provider reported serving from its prompt cache",
            _SAMPLE_LABELS,
            registry=r,
        )
        self.cache_saved_usd = counter(
            "gateway_cache_saved_usd_total",
            "Estimated money the prompt cache saved: cached tokens x (price_in - price_cached_in)",
            _SAMPLE_LABELS,
            registry=r,
        )
        self.cache_saved_seconds = counter(
            "gateway_cache_saved_ttft_seconds_total",
            "Estimated first-token time the prompt cache saved: cached tokens / the deployment's prefill speed",
            _SAMPLE_LABELS,
            registry=r,
        )
        self.window_hit_ratio = gauge(
            "gateway_window_cache_hit_ratio",
            "Cached / prompt tokens over the window, of answers whose provider reports cached tokens",
            _WINDOW_LABELS,
            registry=r,
        )
        # The stats store and its window.
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
        # The API dimension: which API clients speak, and its first-token time (values: chat,
        # completions, embeddings, responses, messages).
        self.api_requests = counter(
            "gateway_api_requests_total",
            "Client requests answered, by model, API, the answering upstream's API (translated when it differs;"
            " none when no upstream answered) and HTTP status class",
            ["model", "api", "upstream_api", "status_class"],
            registry=r,
        )
        self.api_ttft = histogram(
            "gateway_api_ttft_seconds",
            "Upstream request sent to first output-bearing event, by model and API",
            ["model", "api"],
            buckets=TTFT_BUCKETS,
            registry=r,
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
        # Spend and budgets by key name and team (``gateway.admission.spending.metrics``).
        self.spend = SpendMetrics(r)
        self._genai: GenAIFamilies | None = None
        self._window_series: set[tuple[str, ...]] = set()
        self._dropped_seen = 0
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        self._circuits_known: set[str] = set()
        self._providers: dict[DeploymentKey, str] = {}

    def prepare(self, config: GatewayConfig) -> None:
        """Create, at zero, every series ``config`` bounds: called at start and on each reload.

        A series that appears only with its first event leaves a panel or an alert with *no data*
        on a healthy gateway (no fallback yet, no hedge, no circuit ever opened), which reads as
        "broken" and makes ``rate()`` start from the wrong baseline. So each counter gets its
        (model, provider) × outcome/reason/result series now, each provider its in-flight and
        capacity gauges, and a provider not seen before a closed circuit. Series of providers a
        reload removed stay: a counter must not vanish mid-life.
        """
        self.spend.named = config.server.metrics_key_env is not None
        pairs = dict.fromkeys((m.name, d.provider) for m in config.models for d in m.deployments)
        self._providers = deployment_providers(config)
        for model, provider in pairs:
            for status in STATUS_CLASSES:
                self._series(self.requests, model, provider, status)
            for outcome in get_args(Outcome):
                self._series(self.attempts, model, provider, outcome)
            for reason in get_args(RouteReason):
                self._series(self.route_decisions, model, provider, reason)
            for kind in ("input", "output"):
                self._series(self.tokens, model, provider, kind)
            self._series(self.cost, model, provider)
            self._series(self.fallbacks, model, provider)
            self._series(self.race_loser_seconds, model, provider)
            self._series(self.race_loser_cost, model, provider)
            for hedge in HEDGE_RESULTS:
                self._series(self.hedges, model, provider, hedge)
            for result in BREAK_RESULTS:
                self._series(self.stream_breaks, model, provider, result)
            self._series(self.malformed_events, model, provider)
            self._series(self.cached_tokens, model, provider)
            self._series(self.cache_saved_usd, model, provider)
            self._series(self.cache_saved_seconds, model, provider)
        for model_config in config.models:
            for deployment in model_config.deployments:
                for reason in VALIDITIES[1:]:
                    self._series(self.invalid_answers, model_config.name, deployment.name, reason)
            self._series(self.queue_depth, model_config.name)
            for reason in ("timeout", "full"):
                self._series(self.queue_refusals, model_config.name, reason)
            for choice in AFFINITY_CHOICES:
                for reason in MOVE_REASONS if choice == "move" else ("",):
                    self._series(self.session_routes, model_config.name, choice, reason)
        for provider_config in config.providers:
            name = provider_config.name
            self._series(self.inflight, name)
            self.set_provider_capacity(name, provider_config.max_concurrency)
            if name not in self._circuits_known:
                self.set_circuit_state(name, "closed")

    def _series(self, family: _Family, *values: str) -> _Family:
        """``family.labels(*values)``, remembered: the hot path asks for the same few series on every
        request, and prometheus-client's ``labels`` validates and locks each time. Only for series
        that are never removed (the window gauges are, and do not come through here)."""
        key = (family, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*values)
        return cast(_Family, child)

    def genai(self) -> GenAIFamilies:
        """OpenTelemetry's GenAI client histograms (``gateway.metrics.genai``), registered on first use."""
        if self._genai is None:
            self._genai = GenAIFamilies(self.registry)
        return self._genai

    # -- SampleSink -------------------------------------------------------------------------

    def record(self, sample: Sample) -> None:
        """One finished attempt. Missing values are skipped, never counted as zero."""
        labels = (sample.model, sample.provider)
        self._series(self.attempts, *labels, sample.outcome).inc()
        if sample.ttft_s is not None:
            self._series(self.ttft, *labels).observe(sample.ttft_s)
            self._series(self.api_ttft, sample.model, sample.endpoint).observe(sample.ttft_s)
        if sample.first_answer_s is not None:
            self._series(self.first_answer, *labels).observe(sample.first_answer_s)
        if sample.tokens_per_s is not None:
            self._series(self.tokens_per_second, *labels).observe(sample.tokens_per_s)
        if sample.outcome == "ok":
            if sample.e2e_s is not None:
                self._series(self.end_to_end, *labels).observe(sample.e2e_s)
            if sample.output_tokens is not None:
                self._series(self.output_tokens_per_answer, *labels).observe(sample.output_tokens)
        output = sample.output_tokens if sample.output_tokens is not None else sample.usage_completion_tokens
        # Input counts where the relay charges for it: answers, and failures that produced output.
        if sample.outcome == "ok" or output:
            prompt = sample.usage_prompt_tokens
            prompt = prompt if prompt is not None else sample.prompt_tokens_estimate
            if prompt:
                self._series(self.tokens, *labels, "input").inc(prompt)
        if output:
            self._series(self.tokens, *labels, "output").inc(output)
        if sample.cost_usd:
            self._series(self.cost, *labels).inc(sample.cost_usd)
        if sample.validity is not None and sample.validity != "valid":
            self._series(self.invalid_answers, sample.model, sample.deployment, sample.validity).inc()
        if sample.hedged and sample.outcome == "client_cancelled":
            if sample.attempt_s is not None:
                self._series(self.race_loser_seconds, *labels).inc(sample.attempt_s)
            if sample.cost_usd:
                self._series(self.race_loser_cost, *labels).inc(sample.cost_usd)

    # -- Hooks: the api and the relay --------------------------------------------------------

    def request_answered(self, model: str, provider: str, status: int | None) -> None:
        """One client request done; ``model``/``provider`` are "" when it never reached one."""
        self._series(self.requests, model, provider, status_class(status)).inc()

    def api_request_answered(self, model: str, api: str, status: int | None, upstream_api: str | None = None) -> None:
        """One client request done, by the API it spoke and the one its answer came in (None: no upstream answered);
        ``model`` is "" when it never reached one."""
        self._series(self.api_requests, model, api, upstream_api or "none", status_class(status)).inc()

    def set_provider_capacity(self, provider: str, max_concurrency: int | None) -> None:
        """The configured ceiling; a provider without one has no series (there is no number to show)."""
        if max_concurrency is not None:
            self.capacity.labels(provider).set(max_concurrency)
        else:
            self._remove(self.capacity, (provider,))

    def set_provider_limit(self, provider: str, limit: ProviderLimit, now: float) -> None:
        """The provider's learned limit and last reported budget (read at scrape time)."""
        self._series(self.concurrency_limit, provider).set(limit.allowed)
        for kind, remaining in (("requests", limit.remaining_requests), ("tokens", limit.remaining_tokens)):
            if remaining is not None:
                self._series(self.ratelimit_remaining, provider, kind).set(remaining)
        reset_at = max(limit.reset_at or 0.0, limit.blocked_until)
        self._series(self.ratelimit_reset, provider).set(max(0.0, reset_at - now))

    def observe_overhead(self, mode: OverheadMode, seconds: float) -> None:
        self._series(self.overhead, mode).observe(max(0.0, seconds))

    # -- GatewayEvents: the router and the relay ---------------------------------------------

    def decision(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        pass  # counted when the request commits (``committed``), under the reason it was served by

    def attempt_started(self, model: str, deployment: str, provider: str) -> None:
        self._series(self.inflight, provider).inc()

    def attempt_ended(self, model: str, deployment: str, provider: str) -> None:
        self._series(self.inflight, provider).dec()

    def committed(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        """A request was committed to ``provider`` (its first token came, or its answer)."""
        self._series(self.route_decisions, model, provider, reason).inc()

    def fallback(self, model: str, deployment: str, provider: str, next_deployment: str) -> None:
        """An attempt at ``provider`` failed and the request moved on to the next candidate."""
        self._series(self.fallbacks, model, provider).inc()

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        pass  # counted per attempt when each ends (``hedge_ended``)

    def hedge_ended(self, model: str, deployment: str, provider: str, result: HedgeResult, is_hedge: bool) -> None:
        """A hedged attempt at ``provider`` ended: ``won`` (it answered) or ``lost`` (cancelled)."""
        self._series(self.hedges, model, provider, result).inc()

    def stream_broke(self, model: str, deployment: str, provider: str, result: BreakResult) -> None:
        """``provider``'s stream broke mid-answer; ``result`` says whether the answer was still finished."""
        self._series(self.stream_breaks, model, provider, result).inc()

    def malformed_stream(self, model: str, deployment: str, provider: str) -> None:
        self._series(self.malformed_events, model, provider).inc()

    def queue_entered(self, model: str) -> None:
        self._series(self.queue_depth, model).inc()

    def queue_left(self, model: str, waited_s: float, outcome: QueueOutcome) -> None:
        if outcome != "full":
            self._series(self.queue_depth, model).dec()
            self._series(self.queue_wait, model).observe(waited_s)
        if outcome in ("timeout", "full"):
            self._series(self.queue_refusals, model, outcome).inc()

    def circuit_changed(self, model: str, deployment: str, provider: str, state: CircuitState) -> None:
        self.set_circuit_state(provider, state)

    def session_routed(self, model: str, deployment: str, choice: AffinityChoice, reason: str | None) -> None:
        self._series(self.session_routes, model, choice, reason or "").inc()

    def session_bound(self, model: str, deployment: str) -> None:
        self._series(self.session_bindings, model, deployment).inc()

    def cache_used(self, model: str, deployment: str, cached_tokens: int, saved_usd: float, saved_s: float) -> None:
        provider = self._providers.get((model, deployment), deployment)
        self._series(self.cached_tokens, model, provider).inc(cached_tokens)
        self._series(self.cache_saved_usd, model, provider).inc(max(0.0, saved_usd))
        self._series(self.cache_saved_seconds, model, provider).inc(max(0.0, saved_s))

    def set_circuit_state(self, provider: str, state: CircuitState) -> None:
        self._circuits_known.add(provider)
        for name in CIRCUIT_STATES:
            self.circuit.labels(provider, name).set(1 if name == state else 0)

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

        ``providers`` maps (model, deployment) to the provider's name (see ``deployment_providers``);
        without it, or for a deployment it does not know, the deployment's name stands in.
        """
        providers = providers or {}
        seen: set[tuple[str, ...]] = set()
        for (model, deployment), summary in snapshot.summaries.items():
            base: tuple[str, ...] = (model, providers.get((model, deployment), deployment), deployment)
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

    @staticmethod
    def _remove(gauge: Gauge, labels: tuple[str, ...]) -> None:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass  # the series was never set: nothing to remove

    # -- Exposition --------------------------------------------------------------------------

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in the format the scraper asked for (Prometheus text, or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
