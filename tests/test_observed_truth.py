"""What a user watches is what was sent: known traffic through real fakes, then every number checked.

Fakes with known first-token waits, paces, lengths, prices and failures serve a gateway over loopback; the
test then reads ``/metrics``, ``GET /v1/gateway/stats`` and the response headers, and holds each figure to
DESIGN.md's definitions: TTFT from the upstream request to the first output chunk, tokens per second over the
answer's span (``tokens ÷ (last − first answer token)``, pinned tokenizer), end-to-end from the client's
request to the last byte, success as complete answers over attempts, cost at the configured prices (cached
prompt tokens at ``price_cached_in``), and the leaderboard fastest first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

# The fake sends token i at first-token + i / pace: the answer's span is (tokens - 1) / pace, so DESIGN's speed
# (tokens over that span) is pace × tokens / (tokens - 1).
# Each wait and speed sits mid-bucket, tens of milliseconds from either bound: a busy host's timers stay inside.
FAST = FakeBehavior(ttft_s=0.23, tokens_per_s=380, output_tokens=41)
SLOW = FakeBehavior(ttft_s=0.6, tokens_per_s=60, output_tokens=21)
FAST_SPEED = 380 * 41 / 40  # in (300, 500]
SLOW_SPEED = 60 * 21 / 20  # in (50, 75]
PRICES = {"fast": (3.0, 6.0), "slow": (0.5, 1.0), "bad": (1.0, 1.0), "flaky": (1.0, 1.0)}


def _scrape(gateway: Gateway) -> Series:
    response = httpx.get(gateway.url + "/metrics")
    assert response.status_code == 200
    series: Series = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            series[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return series


def _value(series: Series, name: str, **labels: str) -> float:
    found = series.get((name, frozenset(labels.items())))
    assert found is not None, f"{name}{labels} is not exported"
    return found


def _assert_quantile(got: float, values: list[float], q: float) -> None:
    """``got`` lies between the samples next to rank ``q`` (however the quantile interpolates), within 2%."""
    ordered = sorted(values)
    assert ordered, "no samples"
    rank = q * (len(ordered) - 1)
    low, high = ordered[int(rank)], ordered[min(len(ordered) - 1, int(rank) + 1)]
    assert low * 0.98 <= got <= high * 1.02, (got, q, ordered)


def _chat(gateway: Gateway, provider: dict[str, Any], *, stream: bool, messages: Any = None) -> httpx.Response:
    """One chat request routed by OpenRouter's ``provider`` object; a stream is read to its end."""
    body = {
        "model": "m",
        "messages": messages or [{"role": "user", "content": "hello there"}],
        "stream": stream,
        "provider": provider,
    }
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=body, timeout=30) as response:
        response.read()
    return response


@pytest.fixture
def served(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> Gateway:
    fast, slow = fakes.start("fast", FAST), fakes.start("slow", SLOW)
    bad = fakes.start("bad", FakeBehavior(status=503))
    # 30 tokens/s over 5 tokens reads 37.5, clear of "slow"'s 63: the board's order never hangs on the timers.
    flaky = fakes.start("flaky", FakeBehavior(status=500, fail_first=2, ttft_s=0.01, tokens_per_s=30, output_tokens=5))
    deployments = {name: {"price_in": p_in, "price_out": p_out} for name, (p_in, p_out) in PRICES.items()}
    # No retries on one deployment and a circuit that stays closed: each attempt is the one the test sent.
    policy = {"failure_threshold": 100}
    return start_gateway(gateway_config([fast, slow, bad, flaky], policy=policy, deployments=deployments))


def test_metrics_stats_and_headers_tell_what_was_sent(served: Gateway) -> None:
    gateway = served
    fast_streams, fast_whole, slow_streams, fallbacks = 6, 3, 5, 2
    for _ in range(fast_streams):
        response = _chat(gateway, {"only": ["fast"]}, stream=True)
        assert response.status_code == 200
        assert response.headers["x-gateway-provider"] == "fast"
        assert response.headers["x-gateway-attempts"] == "1"
        assert response.headers["x-gateway-route"] == "override"
    for _ in range(fast_whole):
        assert _chat(gateway, {"only": ["fast"]}, stream=False).status_code == 200
    for _ in range(slow_streams):
        assert _chat(gateway, {"only": ["slow"]}, stream=True).headers["x-gateway-provider"] == "slow"
    for _ in range(fallbacks):
        response = _chat(gateway, {"order": ["bad", "fast"], "allow_fallbacks": True}, stream=True)
        assert response.status_code == 200
        assert response.headers["x-gateway-provider"] == "fast"
        assert response.headers["x-gateway-attempts"] == "2"
        assert response.headers["x-gateway-route"] == "fallback"
    # "flaky" fails its first two attempts: the first request is retried there twice, then answered.
    flaky = [_chat(gateway, {"only": ["flaky"]}, stream=True) for _ in range(4)]
    assert [r.status_code for r in flaky] == [200] * 4
    assert [r.headers["x-gateway-attempts"] for r in flaky] == ["3", "1", "1", "1"]
    attempts = fast_streams + fast_whole + slow_streams + 2 * fallbacks + 6
    wait_until(lambda: len(gateway.samples.samples) == attempts, 10, what="every attempt recorded")
    samples = gateway.samples.samples
    fast_answers = fast_streams + fast_whole + fallbacks
    fast_streamed = fast_streams + fallbacks

    series = _scrape(gateway)
    fast_labels, slow_labels = {"model": "m", "provider": "fast"}, {"model": "m", "provider": "slow"}
    wait_until(lambda: _value(_scrape(gateway), "gateway_requests_total", **fast_labels, status_class="2xx") > 0)
    series = _scrape(gateway)
    # Counts: client requests by who answered, attempts by outcome, routing reasons.
    assert _value(series, "gateway_requests_total", **fast_labels, status_class="2xx") == fast_answers
    assert _value(series, "gateway_requests_total", **slow_labels, status_class="2xx") == slow_streams
    assert _value(series, "gateway_upstream_requests_total", **fast_labels, outcome="ok") == fast_answers
    bad_labels = {"model": "m", "provider": "bad"}
    assert _value(series, "gateway_upstream_requests_total", **bad_labels, outcome="upstream_error") == fallbacks
    flaky_labels = {"model": "m", "provider": "flaky"}
    assert _value(series, "gateway_upstream_requests_total", **flaky_labels, outcome="upstream_error") == 2
    assert _value(series, "gateway_upstream_requests_total", **flaky_labels, outcome="ok") == 4
    assert _value(series, "gateway_fallbacks_total", **bad_labels) == fallbacks
    assert _value(series, "gateway_routing_decisions_total", **fast_labels, reason="fallback") == fallbacks
    assert _value(series, "gateway_routing_decisions_total", **fast_labels, reason="override") == fast_streams + 3

    # TTFT: only streams have one; each sits above its fake's wait (0.23 s), well under the bucket two bounds up
    # (a busy host may stall one by tens of milliseconds), and the mean is the wait's.
    assert _value(series, "gateway_ttft_seconds_count", **fast_labels) == fast_streamed
    assert _value(series, "gateway_ttft_seconds_bucket", **fast_labels, le="0.2") == 0
    assert _value(series, "gateway_ttft_seconds_bucket", **fast_labels, le="0.4") == fast_streamed
    assert _value(series, "gateway_ttft_seconds_bucket", **slow_labels, le="0.5") == 0
    assert _value(series, "gateway_ttft_seconds_bucket", **slow_labels, le="1.0") == slow_streams
    ttft_sum = _value(series, "gateway_ttft_seconds_sum", **fast_labels)
    assert 0.23 * fast_streamed <= ttft_sum <= 0.3 * fast_streamed
    assert _value(series, "gateway_time_to_first_answer_token_seconds_count", **fast_labels) == fast_streamed
    # Speed: 389.5 tokens/s falls in (300, 500], 63 in (50, 75].
    assert _value(series, "gateway_tokens_per_second_count", **fast_labels) == fast_streamed
    assert _value(series, "gateway_tokens_per_second_bucket", **fast_labels, le="300.0") == 0
    assert _value(series, "gateway_tokens_per_second_bucket", **fast_labels, le="500.0") == fast_streamed
    assert _value(series, "gateway_tokens_per_second_bucket", **slow_labels, le="50.0") == 0
    assert _value(series, "gateway_tokens_per_second_bucket", **slow_labels, le="75.0") == slow_streams
    # End-to-end: every complete answer, no shorter than its first token and its span.
    assert _value(series, "gateway_end_to_end_seconds_count", **fast_labels) == fast_answers
    assert _value(series, "gateway_end_to_end_seconds_count", **slow_labels) == slow_streams
    slow_e2e = _value(series, "gateway_end_to_end_seconds_sum", **slow_labels)
    assert slow_e2e >= slow_streams * (0.6 + 20 / 60)
    assert _value(series, "gateway_end_to_end_seconds_bucket", **slow_labels, le="0.5") == 0
    # Tokens: the pinned tokenizer's count of the answers (the fake's words are one token each).
    assert _value(series, "gateway_tokens_total", **fast_labels, type="output") == fast_answers * 41
    assert _value(series, "gateway_tokens_total", **slow_labels, type="output") == slow_streams * 21
    assert _value(series, "gateway_output_tokens_per_answer_sum", **slow_labels) == slow_streams * 21
    assert _value(series, "gateway_tokens_total", **bad_labels, type="input") == 0
    # Cost: the provider's usage at the configured prices; failures cost nothing.
    for name in ("fast", "slow"):
        p_in, p_out = PRICES[name]
        expected = sum(
            ((s.usage_prompt_tokens or 0) * p_in + (s.usage_completion_tokens or 0) * p_out) / 1e6
            for s in samples
            if s.provider == name and s.outcome == "ok"
        )
        assert expected > 0
        assert _value(series, "gateway_cost_usd_total", model="m", provider=name) == pytest.approx(expected)
    assert _value(series, "gateway_cost_usd_total", **bad_labels) == 0

    # The window gauges and the stats API agree with each other and with what was sent.
    window = {"model": "m", "deployment": "flaky", "provider": "flaky"}
    assert _value(series, "gateway_window_success_ratio", **window) == pytest.approx(4 / 6)
    assert _value(series, "gateway_window_samples", **window) == 6
    stats = httpx.get(gateway.url + "/v1/gateway/stats").json()
    rows = {row["deployment"]: row for row in stats["data"]}
    # Fastest median first among the deployments measured on enough complete answers; then the thin ones ("flaky"
    # answered 4 times); a deployment with no speed measured (no answer) last.
    assert [row["deployment"] for row in stats["data"]] == ["fast", "slow", "flaky", "bad"]
    assert [row["ranked"] for row in stats["data"]] == [True, True, False, False]
    assert rows["flaky"]["answered"] == 4 and rows["flaky"]["tokens_per_s_vs_fastest"] is None
    fast, slow = rows["fast"], rows["slow"]
    assert fast["samples"] == fast_answers and fast["success_rate"] == 1.0
    assert rows["bad"]["success_rate"] == 0.0 and rows["bad"]["samples"] == fallbacks
    assert rows["flaky"]["success_rate"] == pytest.approx(4 / 6) and rows["flaky"]["judged"] == 6
    for row, ttft, top, speed in ((fast, 0.23, 0.3, FAST_SPEED), (slow, 0.6, 0.75, SLOW_SPEED)):
        assert ttft * 0.98 <= row["ttft_p50_s"] <= row["ttft_p95_s"] <= row["ttft_p99_s"]
        assert row["ttft_p50_s"] <= top
        assert row["tokens_per_s_p99_floor"] <= row["tokens_per_s_p95_floor"] <= row["tokens_per_s_p50"]
        assert speed * 0.75 <= row["tokens_per_s_p50"] <= speed * 1.25
        assert row["e2e_p50_s"] <= row["e2e_p95_s"] <= row["e2e_p99_s"]
        # Each percentile is the samples' own, within the sketch's 2%: upper tails of times, floors of speed;
        # end-to-end of complete answers.
        mine = [s for s in samples if s.deployment == row["deployment"]]
        for field, metric, q in (
            ("ttft_p50_s", "ttft_s", 0.5), ("ttft_p99_s", "ttft_s", 0.99), ("tokens_per_s_p50", "tokens_per_s", 0.5),
            ("tokens_per_s_p95_floor", "tokens_per_s", 0.05), ("tokens_per_s_p99_floor", "tokens_per_s", 0.01),
            ("e2e_p50_s", "e2e_s", 0.5), ("e2e_p95_s", "e2e_s", 0.95), ("e2e_p99_s", "e2e_s", 0.99),
        ):  # fmt: skip
            values = [getattr(s, metric) for s in mine if s.outcome == "ok" or metric != "e2e_s"]
            _assert_quantile(row[field], [v for v in values if v is not None], q)
    assert slow["e2e_p50_s"] >= (0.6 + 20 / 60) * 0.98  # the sketch's relative error
    assert fast["tokens_per_s_vs_fastest"] == 0.0
    assert slow["tokens_per_s_vs_fastest"] == pytest.approx(slow["tokens_per_s_p50"] / fast["tokens_per_s_p50"] - 1)
    assert (fast["price_in"], fast["price_out"]) == PRICES["fast"]
    # The router's explanation counts the same attempts (a failure says something of a provider too).
    (explained,) = httpx.get(gateway.url + "/v1/gateway/routes").json()["data"]
    for route in explained["deployments"]:
        row = rows[route["deployment"]]
        assert route["attempts_in_window"] == row["judged"], route["deployment"]
        assert (route["price_in"], route["price_out"]) == PRICES[route["deployment"]]
    gauge_p50 = _value(series, "gateway_window_ttft_seconds", model="m", provider="fast", deployment="fast", q="0.5")
    assert gauge_p50 == pytest.approx(fast["ttft_p50_s"])


def test_cached_prompt_tokens_are_counted_and_priced(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    cache = FakeBehavior(output_tokens=4, cache_prompts=4, cache_min_tokens=64)
    fake = fakes.start("cache", cache)
    deployments = {"cache": {"price_in": 2.0, "price_out": 4.0, "price_cached_in": 0.5}}
    gateway = start_gateway(gateway_config([fake], deployments=deployments))
    prompt = [{"role": "user", "content": " ".join(f"word{i}" for i in range(400))}]
    for _ in range(2):
        assert _chat(gateway, {}, stream=False, messages=prompt).status_code == 200
    wait_until(lambda: len(gateway.samples.samples) == 2, 10, what="both answers recorded")
    first, second = gateway.samples.samples
    assert not first.usage_cached_tokens and second.usage_cached_tokens
    cached = second.usage_cached_tokens
    prompt_tokens = second.usage_prompt_tokens or 0
    assert second.cost_usd == pytest.approx(
        ((prompt_tokens - cached) * 2.0 + cached * 0.5 + (second.usage_completion_tokens or 0) * 4.0) / 1e6
    )
    labels = {"model": "m", "provider": "cache"}
    wait_until(lambda: _scrape(gateway).get(("gateway_cached_tokens_total", frozenset(labels.items()))) == cached)
    series = _scrape(gateway)
    assert _value(series, "gateway_cache_saved_usd_total", **labels) == pytest.approx(cached * (2.0 - 0.5) / 1e6)
    row = httpx.get(gateway.url + "/v1/gateway/stats").json()["data"][0]
    total_prompt = (first.usage_prompt_tokens or 0) + prompt_tokens
    assert row["cache_hit_ratio"] == pytest.approx(cached / total_prompt)
    assert row["price_cached_in"] == 0.5


def test_reasoning_invalid_answers_and_translated_apis_are_labelled_as_sent(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    thinker = fakes.start("thinker", FakeBehavior(reasoning_tokens=30, output_tokens=10, tokens_per_s=200))
    empty = fakes.start("empty", FakeBehavior(empty_rate=1.0, seed=1))
    gateway = start_gateway(gateway_config([thinker, empty], policy={"failure_threshold": 100}))
    for _ in range(2):
        assert _chat(gateway, {"only": ["thinker"]}, stream=True).status_code == 200
    assert _chat(gateway, {"only": ["empty"]}, stream=False).status_code == 200
    # The Messages API, served by a chat deployment: translated, labelled with both APIs.
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream(
        "POST", gateway.base_url + "/messages", json={**body, "provider": {"only": ["thinker"]}}, timeout=30
    ) as response:
        assert response.status_code == 200 and b"message_stop" in response.read()
    wait_until(lambda: len(gateway.samples.samples) == 4, 10, what="every attempt recorded")
    labels = {"model": "m", "provider": "thinker"}
    wait_until(
        lambda: (
            _scrape(gateway).get(("gateway_requests_total", frozenset({**labels, "status_class": "2xx"}.items()))) == 3
        )
    )
    series = _scrape(gateway)
    # Output tokens are the visible answer's: the 30 reasoning tokens are neither counted nor timed as answer.
    assert _value(series, "gateway_tokens_total", **labels, type="output") == 3 * 10
    assert _value(series, "gateway_ttft_seconds_count", **labels) == 3
    assert _value(series, "gateway_time_to_first_answer_token_seconds_count", **labels) == 3
    for sample in gateway.samples.samples:
        if sample.provider == "thinker":
            assert sample.ttft_s is not None and sample.first_answer_s is not None
            assert sample.ttft_s <= sample.first_answer_s
    # The empty answer: one invalid answer with its reason, by deployment.
    invalid = {"model": "m", "deployment": "empty"}
    assert _value(series, "gateway_invalid_answers_total", **invalid, reason="empty") == 1
    assert _value(series, "gateway_invalid_answers_total", model="m", deployment="thinker", reason="empty") == 0
    rows = {row["deployment"]: row for row in httpx.get(gateway.url + "/v1/gateway/stats").json()["data"]}
    assert rows["empty"]["valid_rate"] == 0.0 and rows["empty"]["invalid_reason"] == "empty"
    # Client API beside the upstream's.
    api = {"model": "m", "status_class": "2xx"}
    assert _value(series, "gateway_api_requests_total", **api, api="chat", upstream_api="chat") == 3
    assert _value(series, "gateway_api_requests_total", **api, api="messages", upstream_api="chat") == 1
    assert _value(series, "gateway_api_ttft_seconds_count", model="m", api="messages") == 1
    assert _value(series, "gateway_api_ttft_seconds_count", model="m", api="chat") == 2


def test_broken_streams_and_timeouts_stay_in_the_success_denominator(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    ok = fakes.start("ok", FakeBehavior(output_tokens=8))
    breaks = fakes.start("breaks", FakeBehavior(output_tokens=8, drop_after=3))
    stalls = fakes.start("stalls", FakeBehavior(output_tokens=8, stall_after=2, stall_s=30))
    policy = {"failure_threshold": 100, "idle_timeout_s": 0.3}
    gateway = start_gateway(gateway_config([ok, breaks, stalls], policy=policy))
    sent = {"ok": 2, "breaks": 2, "stalls": 2}
    for name, count in sent.items():
        for _ in range(count):
            # Each broke after its first bytes: the client has its 200 and an in-band error, no retry.
            assert _chat(gateway, {"only": [name], "allow_fallbacks": False}, stream=True).status_code == 200
    wait_until(lambda: len(gateway.samples.samples) == 6, 10, what="every attempt recorded")
    rows = {row["deployment"]: row for row in httpx.get(gateway.url + "/v1/gateway/stats").json()["data"]}
    assert {name: (rows[name]["judged"], rows[name]["success_rate"]) for name in sent} == {
        "ok": (2, 1.0),
        "breaks": (2, 0.0),
        "stalls": (2, 0.0),
    }
    series = _scrape(gateway)
    outcomes = {("breaks", "broken_stream"): 2, ("stalls", "timeout"): 2, ("ok", "ok"): 2}
    for (name, outcome), count in outcomes.items():
        assert _value(series, "gateway_upstream_requests_total", model="m", provider=name, outcome=outcome) == count
    for name in ("breaks", "stalls"):
        window = {"model": "m", "provider": name, "deployment": name}
        assert _value(series, "gateway_window_success_ratio", **window) == 0.0
        assert _value(series, "gateway_stream_breaks_total", model="m", provider=name, result="failed") == 2
        e2e = series.get(("gateway_end_to_end_seconds_count", frozenset({"model": "m", "provider": name}.items())))
        assert not e2e  # end-to-end is of complete answers
