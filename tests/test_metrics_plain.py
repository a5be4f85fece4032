"""The single-process metrics' plain values against prometheus-client's own classes: the same scrape.

``Metrics`` keeps plain values (``gateway.metrics.plain``); ``WorkerMetrics`` keeps the stock
classes for the multiprocess files. The same calls on both must render the same exposition,
Prometheus text and OpenMetrics, down to each series' order; only the ``_created`` times differ
(each is when its series was made).
"""

from __future__ import annotations

import math
import random
import re

import pytest
from prometheus_client import Counter, Gauge, Histogram

from gateway.admission.spending.store import Booking
from gateway.config import GatewayConfig, parse_config
from gateway.metrics.attempts import TPS_BUCKETS, TTFT_BUCKETS, OverheadMode
from gateway.metrics.host import WorkerMetrics
from gateway.metrics.plain import PlainCounter, PlainGauge, PlainHistogram
from gateway.metrics.series import Metrics
from gateway.routing.capacity import ProviderLimit
from gateway.samples import Sample


class StockMetrics(Metrics):
    counter_class = Counter
    histogram_class = Histogram
    gauge_class = Gauge


def config() -> GatewayConfig:
    return parse_config(
        {
            "providers": [{"name": p, "base_url": f"http://127.0.0.1:9/{p}", "max_concurrency": 4} for p in "ab"],
            "models": [{"name": "m", "deployments": [{"provider": p, "model": "x"} for p in "ab"]}],
        },
        source="t.toml",
    )


def exercise(metrics: Metrics) -> None:
    rng = random.Random(20)
    metrics.prepare(config())
    edges = [*TTFT_BUCKETS, *TPS_BUCKETS, 0.0, -1.0, math.inf, math.nan, 1e-9]
    for i in range(400):
        speed = rng.choice([None, rng.choice(edges), rng.uniform(0, 200_000)])
        metrics.record(
            Sample(
                model=rng.choice(["m", "n"]),
                deployment="d",
                provider=rng.choice("abc"),
                endpoint=rng.choice(["chat", "responses"]),
                stream=True,
                outcome=rng.choice(["ok", "ok", "timeout", "upstream_error"]),
                started_at=0.0,
                ttft_s=rng.choice([None, rng.choice(edges), rng.expovariate(2.0)]),
                first_answer_s=rng.choice([None, rng.expovariate(2.0)]),
                tokens_per_s=speed,
                e2e_s=rng.choice([None, rng.expovariate(0.1), 600.0]),
                output_tokens=rng.choice([None, 0, 1, rng.randint(1, 20_000)]),
                usage_prompt_tokens=rng.choice([None, rng.randint(0, 900)]),
                prompt_tokens_estimate=rng.randint(0, 50),
                cost_usd=rng.choice([0.0, rng.random() / 1000]),
            )
        )
        metrics.request_answered("m", rng.choice("ab"), rng.choice([200, 429, 502, None]))
        metrics.api_request_answered("m", "chat", 200)
        metrics.observe_overhead(rng.choice(["stream", "full"]), rng.choice([-0.001, rng.expovariate(1000.0)]))
        metrics.attempt_started("m", "d", "a")
        if i % 3:
            metrics.attempt_ended("m", "d", "a")
        metrics.committed("m", "d", "a", "best-score")
    metrics.queue_entered("m")
    metrics.queue_left("m", 0.3, "timeout")
    metrics.cache_used("m", "a", 120, 0.001, 0.05)
    metrics.set_provider_limit("a", ProviderLimit(limit=3.0, ceiling=4, remaining_requests=7), 10.0)
    metrics.samples_dropped(2)
    for cost in (0, 12_345, 7):  # the spend counter: plain values too (``SpendMetrics``' counter_class)
        metrics.spend.booked("k", "t", [Booking("k1", "t", "m", "a", "a", cost), Booking("k1", "t", "m", "b", "b", 3)])


def rendered(metrics: Metrics) -> tuple[str, str]:
    text = metrics.render()[0].decode()
    open_metrics = metrics.render("application/openmetrics-text; version=1.0.0")[0].decode()
    created = re.compile(r"^(\S+_created(?:\{[^}]*\})?) \S+$", re.MULTILINE)
    return created.sub(r"\1 T", text), created.sub(r"\1 T", open_metrics)


def test_plain_values_render_what_prometheus_clients_own_classes_render() -> None:
    plain, stock = Metrics(process_metrics=False), StockMetrics(process_metrics=False)
    exercise(plain)
    exercise(stock)
    assert rendered(plain) == rendered(stock)
    assert "gateway_tokens_per_second_bucket" in rendered(plain)[0]
    assert 'gateway_spend_usd_total{key="",model="m",provider="a",team=""} 1.2352e-05' in rendered(plain)[0]
    assert isinstance(plain.spend.spend, PlainCounter) and not isinstance(stock.spend.spend, PlainCounter)


def test_errors_are_prometheus_clients() -> None:
    counter = PlainCounter("c_total", "c", ["x"], registry=None)
    histogram = PlainHistogram("h", "h", ["x"], registry=None)
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("1").inc(-1)
    with pytest.raises(ValueError, match="missing label values"):
        counter.inc()
    with pytest.raises(ValueError, match="missing label values"):
        histogram.observe(1.0)


def test_the_workers_keep_prometheus_clients_own_classes() -> None:
    # Only prometheus-client's value classes write the multiprocess files that --workers sums.
    assert WorkerMetrics.counter_class is Counter and WorkerMetrics.histogram_class is Histogram
    assert WorkerMetrics.gauge_class is Gauge
    assert isinstance(Metrics(process_metrics=False).requests, PlainCounter)


def test_request_done_counts_what_the_three_client_hooks_count() -> None:
    # The access log's one call per request (one look-up for the three series) against the hooks it replaced.
    rng = random.Random(7)
    one, three = Metrics(process_metrics=False), Metrics(process_metrics=False)
    for metrics in (one, three):
        metrics.prepare(config())
    for _ in range(500):
        model, provider = rng.choice([("m", "a"), ("m", "b"), ("", "")])
        api, upstream = rng.choice([("chat", "chat"), ("messages", "chat"), ("chat", None)])
        status = rng.choice([200, 429, 502, None])
        mode: OverheadMode | None = rng.choice(["stream", "full", None])
        overhead = None if mode is None else rng.choice([-0.001, rng.expovariate(1000.0)])
        one.request_done(model, provider, api, upstream, status, mode, overhead)
        three.request_answered(model, provider, status)
        three.api_request_answered(model, api, status, upstream)
        if mode is not None and overhead is not None:
            three.observe_overhead(mode, overhead)
    assert rendered(one) == rendered(three)
    assert (
        'gateway_api_requests_total{api="messages",model="m",status_class="2xx",upstream_api="chat"}'
        in (rendered(one)[0])
    )


class SeriesPerCall(Metrics):
    """``record`` as it was before its children were kept per (model, provider, deployment, API): every series
    found through ``_series`` on every call. The reference the kept children must render the same as."""

    def record(self, sample: Sample) -> None:
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


def varied_samples(count: int, seed: int) -> list[Sample]:
    """Samples over every branch of ``record``: outcomes, missing values, validity, hedges, two APIs."""
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        outcome = rng.choice(["ok", "ok", "timeout", "upstream_error", "client_cancelled", "broken_stream"])
        samples.append(
            Sample(
                model=rng.choice(["m", "n"]),
                deployment=rng.choice(["a", "b", "b2"]),
                provider=rng.choice("ab"),
                endpoint=rng.choice(["chat", "responses", "messages"]),
                stream=rng.random() < 0.5,
                outcome=outcome,  # type: ignore[arg-type]
                started_at=0.0,
                ttft_s=rng.choice([None, rng.expovariate(2.0), 0.0]),
                first_answer_s=rng.choice([None, rng.expovariate(2.0)]),
                tokens_per_s=rng.choice([None, rng.uniform(0, 5000)]),
                e2e_s=rng.choice([None, rng.expovariate(0.1)]),
                output_tokens=rng.choice([None, 0, rng.randint(1, 2000)]),
                usage_prompt_tokens=rng.choice([None, 0, rng.randint(1, 900)]),
                usage_completion_tokens=rng.choice([None, rng.randint(0, 900)]),
                prompt_tokens_estimate=rng.choice([None, rng.randint(0, 50)]),
                cost_usd=rng.choice([None, 0.0, rng.random() / 1000]),
                hedged=rng.random() < 0.2,
                attempt_s=rng.choice([None, rng.expovariate(1.0)]),
                kind=rng.choice([None, "plain", "tools"]),
                validity=rng.choice([None, "valid", "valid", "empty", "truncated"]),
            )
        )
    return samples


@pytest.mark.parametrize("prepared", [True, False])
def test_records_kept_children_render_what_series_per_call_renders(prepared: bool) -> None:
    # The same samples through both: the same values, the same series, made in the same order.
    kept, per_call = Metrics(process_metrics=False), SeriesPerCall(process_metrics=False)
    for metrics in (kept, per_call):
        if prepared:
            metrics.prepare(config())
        for sample in varied_samples(600, seed=11):
            metrics.record(sample)
    assert rendered(kept) == rendered(per_call)
    assert 'gateway_invalid_answers_total{deployment="b2",model="n",reason="empty"}' in rendered(kept)[0]
    assert "gateway_race_loser_seconds_total" in rendered(kept)[0]


def test_plain_gauges_inc_and_dec_as_prometheus_clients_own() -> None:
    plain, stock = PlainGauge("g", "g", ["x"], registry=None), Gauge("g", "g", ["x"], registry=None)
    rng = random.Random(2)
    for _ in range(200):
        amount = rng.choice([1, 0.1, 3.7, -2.2])
        for gauge in (plain, stock):
            child = gauge.labels("a")
            child.inc(amount) if amount > 0 else child.dec(-amount)
            child.dec(0.3)
    assert plain.labels("a")._value.get() == stock.labels("a")._value.get()
    with pytest.raises(ValueError, match="missing label values"):
        plain.inc()
    recent = PlainGauge("r", "r", registry=None, multiprocess_mode="mostrecent")
    with pytest.raises(RuntimeError, match="mostrecent"):
        recent.dec()
