"""The routing and provider-health series: where requests went, why, and what each provider can take.

Fed by the router and the relay as ``GatewayEvents`` (decisions, fallbacks, hedges, broken
streams, the queue, circuits, sessions and prompt caches), and by the capacity controller at
scrape time (concurrency limits, the providers' reported rate-limit budgets).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client import CollectorRegistry, Gauge

from gateway.config import GatewayConfig
from gateway.metrics.children import plain_children
from gateway.metrics.family import SAMPLE_LABELS, SeriesFamilies, deployment_providers
from gateway.routing.capacity import ProviderLimit
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

QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)
HEDGE_RESULTS: tuple[HedgeResult, ...] = get_args(HedgeResult)
BREAK_RESULTS: tuple[BreakResult, ...] = get_args(BreakResult)


class RoutingSeries(SeriesFamilies):
    """Routing decisions, provider capacity and health, the queue, sessions and caches (a part of ``Metrics``)."""

    def _register_routing_series(self, r: CollectorRegistry) -> None:
        counter, histogram, gauge = self.counter_class, self.histogram_class, self.gauge_class
        self._plain_inflight: dict[str, Any] = {}
        """The in-flight children by provider, once asked for, when their values are plain: the events add to them."""
        self._plain_committed: dict[tuple[str, str, str], Any] = {}
        """``route_decisions``' children by (model, provider, reason), likewise."""
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
            [*SAMPLE_LABELS, "reason"],
            registry=r,
        )
        self.fallbacks = counter(
            "gateway_fallbacks_total", "Failed attempts followed by another attempt", SAMPLE_LABELS, registry=r
        )
        self.hedges = counter(
            "gateway_hedges_total", "Hedged attempts by result (won, lost)", [*SAMPLE_LABELS, "result"], registry=r
        )
        self.stream_breaks = counter(
            "gateway_stream_breaks_total",
            "Streams whose upstream failed after part of the answer reached the client, by what followed "
            "(recovered: another deployment finished the answer; failed: the stream ended with an error event)",
            [*SAMPLE_LABELS, "result"],
            registry=r,
        )
        self.malformed_events = counter(
            "gateway_malformed_events_total",
            "Streams with an event that was not valid JSON: after the first output relayed as it came (the client "
            "skipped it), not against the provider's health; before it, the attempt failed and the next was asked",
            SAMPLE_LABELS,
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
            SAMPLE_LABELS,
            registry=r,
        )
        self.cache_saved_usd = counter(
            "gateway_cache_saved_usd_total",
            "Estimated money the prompt cache saved: cached tokens x (price_in - price_cached_in)",
            SAMPLE_LABELS,
            registry=r,
        )
        self.cache_saved_seconds = counter(
            "gateway_cache_saved_ttft_seconds_total",
            "Estimated first-token time the prompt cache saved: cached tokens / the deployment's prefill speed",
            SAMPLE_LABELS,
            registry=r,
        )
        self._circuits_known: set[str] = set()
        self._providers: dict[DeploymentKey, str] = {}
        self._live: tuple[frozenset[str], frozenset[str]] | None = None
        """The providers and models of the config last prepared (None before the first: every name counts)."""

    def _prepare_routing_series(self, pairs: Iterable[tuple[str, str]], config: GatewayConfig) -> None:
        """The series ``prepare`` creates at zero: per (model, provider) pair, model and provider."""
        self._providers = deployment_providers(config)
        for model, provider in pairs:
            for reason in get_args(RouteReason):
                self._series(self.route_decisions, model, provider, reason)
            self._series(self.fallbacks, model, provider)
            for hedge in HEDGE_RESULTS:
                self._series(self.hedges, model, provider, hedge)
            for result in BREAK_RESULTS:
                self._series(self.stream_breaks, model, provider, result)
            self._series(self.malformed_events, model, provider)
            self._series(self.cached_tokens, model, provider)
            self._series(self.cache_saved_usd, model, provider)
            self._series(self.cache_saved_seconds, model, provider)
        for model_config in config.models:
            self._series(self.queue_depth, model_config.name)
            for reason in ("timeout", "full"):
                self._series(self.queue_refusals, model_config.name, reason)
            for choice in AFFINITY_CHOICES:
                for reason in MOVE_REASONS if choice == "move" else ("",):
                    self._series(self.session_routes, model_config.name, choice, reason)
        live = (frozenset(p.name for p in config.providers), frozenset(m.name for m in config.models))
        if self._live is not None:
            self._retire(self._live[0] - live[0], self._live[1] - live[1])
        self._live = live
        for provider_config in config.providers:
            name = provider_config.name
            self._series(self.inflight, name)
            self.set_provider_capacity(name, provider_config.max_concurrency)
            if name not in self._circuits_known:
                self.set_circuit_state(name, "closed")

    def _retire(self, providers: Iterable[str], models: Iterable[str]) -> None:
        """Remove the gauges of providers and models a reload removed: a gauge says how things are now, and those
        are no more (their counters and histograms stay: a counter must not vanish mid-life). A count with work
        still on it (attempts in flight, requests in the queue) drains first."""
        for provider in providers:
            self._circuits_known.discard(provider)
            for state in CIRCUIT_STATES:
                self._forget(self.circuit, provider, state)
            for gauge in (self.capacity, self.concurrency_limit, self.ratelimit_reset):
                self._forget(gauge, provider)
            for kind in ("requests", "tokens"):
                self._forget(self.ratelimit_remaining, provider, kind)
            self._plain_inflight.pop(provider, None)  # its events take the slow road, which drains it
            self._drain(self.inflight, provider, 0.0)
        for model in models:
            self._drain(self.queue_depth, model, 0.0)

    def _drain(self, gauge: Gauge, name: str, change: float) -> None:
        """Add ``change`` to the count ``name`` of a provider or model no longer configured, removing the series
        once it is 0. Until then the attempts and waiters of the old runtime still report to it. A start there
        (an old runtime's retry of a removed provider) counts even when the series had gone (it is made again): an
        end takes from the count only what a start put in, so a reload that brings the name back before the end
        keeps the series, and its count, as they are, never below 0. An end whose series is gone is left alone."""
        child = self._children.get((gauge, (name,)))
        if child is None:
            if change <= 0:
                return
            child = self._series(gauge, name)
        child.inc(change)
        if child._value.get() <= 0:
            self._forget(gauge, name)

    def _gone(self, index: int, name: str) -> bool:
        """``name`` (0: a provider, 1: a model) is not in the config last prepared."""
        live = self._live
        return live is not None and name not in live[index]

    # -- Hooks: the capacity controller ------------------------------------------------------

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

    # -- GatewayEvents: the router and the relay ---------------------------------------------

    def decision(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        pass  # counted when the request commits (``committed``), under the reason it was served by

    def attempt_started(self, model: str, deployment: str, provider: str) -> None:
        child = self._plain_inflight.get(provider)
        if child is not None:
            child._value._value += 1  # ``inc()`` of a plain gauge (``gateway.metrics.children``)
        elif (gauge := self._inflight_by_call(provider)) is not None:
            gauge.inc()
        else:
            self._drain(self.inflight, provider, 1)

    def attempt_ended(self, model: str, deployment: str, provider: str) -> None:
        child = self._plain_inflight.get(provider)
        if child is not None:
            child._value._value += -1  # ``dec()``, as it adds: ``inc(-1)``
        elif (gauge := self._inflight_by_call(provider)) is not None:
            gauge.dec()
        else:
            self._drain(self.inflight, provider, -1)

    def _inflight_by_call(self, provider: str) -> Gauge | None:
        """``provider``'s in-flight child, kept for the events to update in place when its value is plain; None for
        a provider a reload removed (its count drains, ``_drain``)."""
        if self._gone(0, provider):
            return None
        child = self._series(self.inflight, provider)
        if plain_children(self.inflight):
            self._plain_inflight[provider] = child
        return child

    def committed(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        """A request was committed to ``provider`` (its first token came, or its answer)."""
        child = self._plain_committed.get((model, provider, reason))
        if child is not None:
            child._value._value += 1  # ``inc()`` of a plain counter
            return
        child = self._series(self.route_decisions, model, provider, reason)
        if plain_children(self.route_decisions):
            self._plain_committed[(model, provider, reason)] = child
        child.inc()

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
        if self._gone(1, model):
            self._drain(self.queue_depth, model, 1)
        else:
            self._series(self.queue_depth, model).inc()

    def queue_left(self, model: str, waited_s: float, outcome: QueueOutcome) -> None:
        if outcome != "full":
            if self._gone(1, model):
                self._drain(self.queue_depth, model, -1)
            else:
                self._series(self.queue_depth, model).dec()
            self._series(self.queue_wait, model).observe(waited_s)
        if outcome in ("timeout", "full"):
            self._series(self.queue_refusals, model, outcome).inc()

    def circuit_changed(self, model: str, deployment: str, provider: str, state: CircuitState) -> None:
        if not self._gone(0, provider):  # an old runtime's attempt at a removed provider: its series stay gone
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
