"""The request and attempt series: what clients asked, what each upstream attempt measured and cost.

One ``Sample`` per finished attempt (``record``, the ``SampleSink`` side of ``Metrics``) feeds the
attempt counters and the latency, speed, token and cost histograms; the api and the relay add one
count per answered client request, by status class and by API, and the gateway's own overhead.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any, Literal, get_args

from prometheus_client import CollectorRegistry

from gateway.config import GatewayConfig
from gateway.metrics.children import SampleChildren, plain_children
from gateway.metrics.family import SAMPLE_LABELS, SeriesFamilies
from gateway.samples import VALIDITIES, Outcome, Sample

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
OUTPUT_TOKEN_BUCKETS = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

STATUS_CLASSES = ("2xx", "4xx", "5xx", "cancelled")
"""What ``status_class`` can answer for a request that reached a provider."""


def status_class(status: int | None) -> str:
    """``2xx``/``4xx``/``5xx``, or ``cancelled`` when no response was started (the client left)."""
    return "cancelled" if status is None else f"{status // 100}xx"


class AttemptSeries(SeriesFamilies):
    """Client requests and upstream attempts: counts, latencies, speeds, tokens and cost (a part of ``Metrics``)."""

    def _register_attempt_series(self, r: CollectorRegistry) -> None:
        counter, histogram = self.counter_class, self.histogram_class
        self._request_series: dict[tuple[object, ...], tuple[Any, Any, Any, bool]] = {}
        """``request_done``'s children by (model, provider, api, upstream api, status, overhead mode)."""
        self._sample_children: dict[tuple[str, str, str, str], SampleChildren] = {}
        """``record``'s children by (model, provider, deployment, API)."""
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
            "Upstream attempts by outcome "
            "(ok, upstream_error, timeout, broken_stream, client_cancelled, client_error, deadline)",
            [*SAMPLE_LABELS, "outcome"],
            registry=r,
        )
        self.ttft = histogram(
            "gateway_ttft_seconds",
            "Upstream request sent to first output-bearing chunk",
            SAMPLE_LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.first_answer = histogram(
            "gateway_time_to_first_answer_token_seconds",
            "Upstream request sent to first visible answer token (reasoning excluded)",
            SAMPLE_LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tokens_per_second = histogram(
            "gateway_tokens_per_second",
            "Answer tokens / (last answer token - first answer token), pinned tokenizer",
            SAMPLE_LABELS,
            buckets=TPS_BUCKETS,
            registry=r,
        )
        self.end_to_end = histogram(
            "gateway_end_to_end_seconds",
            "Client request received to last byte sent, complete answers only",
            SAMPLE_LABELS,
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.output_tokens_per_answer = histogram(
            "gateway_output_tokens_per_answer",
            "Answer length in tokens (pinned tokenizer), complete answers only",
            SAMPLE_LABELS,
            buckets=OUTPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.tokens = counter(
            "gateway_tokens_total",
            "Tokens by type: input (provider usage, else the gateway's estimate), output (pinned tokenizer)",
            [*SAMPLE_LABELS, "type"],
            registry=r,
        )
        self.cost = counter("gateway_cost_usd_total", "Cost in USD at configured prices", SAMPLE_LABELS, registry=r)
        self.race_loser_seconds = counter(
            "gateway_race_loser_seconds_total",
            "Seconds race and hedge losers held their slots (cancelled or drained attempts beside the answer)",
            SAMPLE_LABELS,
            registry=r,
        )
        self.race_loser_cost = counter(
            "gateway_race_loser_cost_usd_total",
            "What race and hedge losers cost (their prompts, and the tokens a drained loser read)",
            SAMPLE_LABELS,
            registry=r,
        )
        self.invalid_answers = counter(
            "gateway_invalid_answers_total",
            "Complete answers judged invalid (gateway.quality), by reason: tool_args_not_json, tool_args_schema, "
            "json_invalid, json_schema, empty, truncated, degenerate, wrong_stop",
            ["model", "deployment", "reason"],
            registry=r,
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

    def _prepare_attempt_series(self, pairs: Iterable[tuple[str, str]], config: GatewayConfig) -> None:
        """The series ``prepare`` creates at zero for each (model, provider) pair and deployment."""
        for model, provider in pairs:
            for status in STATUS_CLASSES:
                self._series(self.requests, model, provider, status)
            for outcome in get_args(Outcome):
                self._series(self.attempts, model, provider, outcome)
            for kind in ("input", "output"):
                self._series(self.tokens, model, provider, kind)
            self._series(self.cost, model, provider)
            self._series(self.race_loser_seconds, model, provider)
            self._series(self.race_loser_cost, model, provider)
        for model_config in config.models:
            for deployment in model_config.deployments:
                for reason in VALIDITIES[1:]:
                    self._series(self.invalid_answers, model_config.name, deployment.name, reason)

    # -- SampleSink -------------------------------------------------------------------------

    def record(self, sample: Sample) -> None:
        """One finished attempt. Missing values are skipped, never counted as zero.

        The sample's children are found with one look-up (``SampleChildren``, per model, provider, deployment
        and API), each made on its first use, as ``_series`` would: a series shows only once it was touched. With
        plain values (``gateway.metrics.children``) each is updated here, in this frame, as ``inc``/``observe``
        would update it; otherwise through those methods (``_record_by_calls``)."""
        key = (sample.model, sample.provider, sample.deployment, sample.endpoint)
        children = self._sample_children.get(key)
        if children is None:
            children = self._sample_children[key] = SampleChildren(self, *key)
        if not children.plain:
            self._record_by_calls(sample, children)
            return
        outcome = sample.outcome
        child = children.attempts.get(outcome)
        if child is None:
            child = children.attempts[outcome] = self._series(self.attempts, key[0], key[1], outcome)
        child._value._value += 1  # ``inc()``
        # Each histogram's child made in the order ``_record_by_calls`` makes them, then every value observed as
        # ``PlainHistogram.observe`` observes it (one loop, no call per value).
        observed: list[tuple[Any, float]] = []
        ttft = sample.ttft_s
        if ttft is not None:
            observed.append((children.ttft or children.make("ttft"), ttft))
            observed.append((children.api_ttft or children.make("api_ttft"), ttft))
        value = sample.first_answer_s
        if value is not None:
            observed.append((children.first_answer or children.make("first_answer"), value))
        value = sample.tokens_per_s
        if value is not None:
            observed.append((children.tokens_per_second or children.make("tokens_per_second"), value))
        ok = outcome == "ok"
        output = sample.output_tokens
        if ok:
            value = sample.e2e_s
            if value is not None:
                observed.append((children.end_to_end or children.make("end_to_end"), value))
            if output is not None:
                made = children.output_tokens_per_answer or children.make("output_tokens_per_answer")
                observed.append((made, output))
        for histogram, value in observed:
            histogram._sum._value += value
            bounds = histogram._upper_bounds
            index = bisect_left(bounds, value)  # as ``PlainHistogram.observe``: never a bucket for NaN
            if index < len(bounds) and value <= bounds[index]:
                histogram._buckets[index]._value += 1
        if output is None:
            output = sample.usage_completion_tokens
        # Input counts where the relay charges for it: answers, and failures that produced output. A negative
        # amount (or NaN) goes through ``inc``, which refuses it (or adds it) as before.
        if ok or output:
            prompt = sample.usage_prompt_tokens
            prompt = prompt if prompt is not None else sample.prompt_tokens_estimate
            if prompt:
                child = children.input_tokens or children.make("input_tokens")
                if prompt > 0:
                    child._value._value += prompt
                else:
                    child.inc(prompt)
        if output:
            child = children.output_tokens or children.make("output_tokens")
            if output > 0:
                child._value._value += output
            else:
                child.inc(output)
        cost = sample.cost_usd
        if cost:
            child = children.cost or children.make("cost")
            if cost > 0:
                child._value._value += cost
            else:
                child.inc(cost)
        validity = sample.validity
        if validity is not None and validity != "valid" or sample.hedged:
            self._record_rare(sample, outcome)

    def _record_by_calls(self, sample: Sample, children: SampleChildren) -> None:
        """``record`` through each child's ``inc``/``observe``: for values that are not plain (prometheus-client's
        own, the multiprocess files)."""
        outcome = sample.outcome
        child = children.attempts.get(outcome)
        if child is None:
            child = children.attempts[outcome] = self._series(self.attempts, sample.model, sample.provider, outcome)
        child.inc()
        ttft = sample.ttft_s
        if ttft is not None:
            (children.ttft or children.make("ttft")).observe(ttft)
            (children.api_ttft or children.make("api_ttft")).observe(ttft)
        if sample.first_answer_s is not None:
            (children.first_answer or children.make("first_answer")).observe(sample.first_answer_s)
        if sample.tokens_per_s is not None:
            (children.tokens_per_second or children.make("tokens_per_second")).observe(sample.tokens_per_s)
        ok = outcome == "ok"
        output = sample.output_tokens
        if ok:
            if sample.e2e_s is not None:
                (children.end_to_end or children.make("end_to_end")).observe(sample.e2e_s)
            if output is not None:
                (children.output_tokens_per_answer or children.make("output_tokens_per_answer")).observe(output)
        if output is None:
            output = sample.usage_completion_tokens
        # Input counts where the relay charges for it: answers, and failures that produced output.
        if ok or output:
            prompt = sample.usage_prompt_tokens
            prompt = prompt if prompt is not None else sample.prompt_tokens_estimate
            if prompt:
                (children.input_tokens or children.make("input_tokens")).inc(prompt)
        if output:
            (children.output_tokens or children.make("output_tokens")).inc(output)
        if sample.cost_usd:
            (children.cost or children.make("cost")).inc(sample.cost_usd)
        validity = sample.validity
        if validity is not None and validity != "valid" or sample.hedged:
            self._record_rare(sample, outcome)

    def _record_rare(self, sample: Sample, outcome: Outcome) -> None:
        """What only some samples count: an invalid answer, a race's loser."""
        validity = sample.validity
        if validity is not None and validity != "valid":
            self._series(self.invalid_answers, sample.model, sample.deployment, validity).inc()
        if sample.hedged and outcome == "client_cancelled":
            labels = (sample.model, sample.provider)
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

    def observe_overhead(self, mode: OverheadMode, seconds: float) -> None:
        self._series(self.overhead, mode).observe(max(0.0, seconds))

    def request_done(
        self,
        model: str,
        provider: str,
        api: str,
        upstream_api: str | None,
        status: int | None,
        mode: OverheadMode | None,
        overhead_s: float | None,
    ) -> None:
        """``request_answered``, ``api_request_answered`` and (with a ``mode``) ``observe_overhead`` of one request,
        the three series found with one look-up: the access log's every request, the same few label sets."""
        key = (model, provider, api, upstream_api, status, mode)
        series = self._request_series.get(key)
        if series is None:
            cls = status_class(status)
            series = self._request_series[key] = (
                self._series(self.requests, model, provider, cls),
                self._series(self.api_requests, model, api, upstream_api or "none", cls),
                self._series(self.overhead, mode) if mode is not None else None,
                plain_children(self.requests, self.api_requests, self.overhead),
            )
        requests, api_requests, overhead, plain = series
        if not plain:
            requests.inc()
            api_requests.inc()
            if overhead is not None and overhead_s is not None:
                overhead.observe(max(0.0, overhead_s))
            return
        # Plain values (``gateway.metrics.children``): ``inc()`` twice and ``observe``, here.
        requests._value._value += 1
        api_requests._value._value += 1
        if overhead is not None and overhead_s is not None:
            value = max(0.0, overhead_s)
            overhead._sum._value += value
            bounds = overhead._upper_bounds
            index = bisect_left(bounds, value)
            if index < len(bounds) and value <= bounds[index]:
                overhead._buckets[index]._value += 1
