"""``GET /metrics`` after real traffic, read with prometheus-client's own parsers; and the hooks."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import AppOptions, create_app
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.fakes import FakeBehavior
from gateway.metrics.attempts import TPS_BUCKETS, TTFT_BUCKETS
from gateway.metrics.family import deployment_providers
from gateway.metrics.series import Metrics
from gateway.samples import Sample
from gateway.stats import StatsSnapshot
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

ANSWER_TOKENS = 12
FIRST_TOKEN_S = 0.06


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(gateway: Gateway) -> Series:
    """Every sample of ``/metrics`` as {(name, labels): value}, parsed by prometheus-client's parser."""
    response = httpx.get(gateway.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    series: Series = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            series[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return series


def value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


def test_metrics_after_real_traffic(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    bad = fakes.start("bad", FakeBehavior(status=500))
    good = fakes.start("good", FakeBehavior(ttft_s=FIRST_TOKEN_S, output_tokens=ANSWER_TOKENS, tokens_per_s=500))
    # A high failure_threshold keeps "bad"'s circuit closed: every request tries it, then falls back.
    gateway = start_gateway(gateway_config([bad, good], policy={"failure_threshold": 100}))
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    streams, fulls = 4, 3
    for _ in range(streams):
        chunks = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    for _ in range(fulls):
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
    total = streams + fulls
    # The access log (and its counter) is written after the last byte: poll, never sleep.
    wait_until(lambda: gateway.metrics.registry.get_sample_value("gateway_requests_total", _good_2xx()) == total, 10)

    series = scrape(gateway)
    m_bad, m_good = {"model": "m", "provider": "bad"}, {"model": "m", "provider": "good"}
    assert value(series, "gateway_requests_total", **_good_2xx()) == total
    assert value(series, "gateway_upstream_requests_total", **m_bad, outcome="upstream_error") == total
    assert value(series, "gateway_upstream_requests_total", **m_good, outcome="ok") == total
    assert value(series, "gateway_fallbacks_total", **m_bad) == total
    assert value(series, "gateway_routing_decisions_total", **m_good, reason="fallback") == total
    assert value(series, "gateway_inflight_requests", provider="good") == 0
    assert value(series, "gateway_inflight_requests", provider="bad") == 0
    assert value(series, "gateway_provider_max_concurrency", provider="good") == 256
    assert value(series, "gateway_stats_backend_healthy", backend="memory") == 1

    # TTFT is only measured on streams; the fake waits FIRST_TOKEN_S, so no TTFT is below it.
    assert value(series, "gateway_ttft_seconds_count", **m_good) == streams
    assert value(series, "gateway_ttft_seconds_bucket", **m_good, le="0.05") == 0
    assert value(series, "gateway_ttft_seconds_bucket", **m_good, le="+Inf") == streams
    buckets = [value(series, "gateway_ttft_seconds_bucket", **m_good, le=str(b)) or 0.0 for b in TTFT_BUCKETS]
    assert buckets == sorted(buckets) and buckets[-1] == streams  # cumulative, all under the top bound
    ttft_sum = value(series, "gateway_ttft_seconds_sum", **m_good)
    assert ttft_sum is not None and ttft_sum >= streams * FIRST_TOKEN_S
    assert value(series, "gateway_time_to_first_answer_token_seconds_count", **m_good) == streams
    assert value(series, "gateway_tokens_per_second_count", **m_good) == streams
    assert value(series, "gateway_tokens_per_second_bucket", **m_good, le=f"{float(TPS_BUCKETS[-1])}") is not None
    assert value(series, "gateway_end_to_end_seconds_count", **m_good) == total
    assert value(series, "gateway_output_tokens_per_answer_sum", **m_good) == total * ANSWER_TOKENS
    # The fake's words are one token each in the pinned encoding: the count is exact.
    assert value(series, "gateway_tokens_total", **m_good, type="output") == total * ANSWER_TOKENS
    input_tokens = value(series, "gateway_tokens_total", **m_good, type="input")
    assert input_tokens is not None and input_tokens > 0
    assert value(series, "gateway_tokens_total", **m_bad, type="input") == 0  # failures are not charged
    cost = value(series, "gateway_cost_usd_total", **m_good)
    expected_cost = sum(s.cost_usd or 0.0 for s in gateway.samples.samples)
    assert cost == pytest.approx(expected_cost) and expected_cost > 0
    assert value(series, "gateway_overhead_seconds_count", mode="stream") == streams
    assert value(series, "gateway_overhead_seconds_count", mode="full") == fulls
    assert value(series, "gateway_build_info", version=_version()) == 1


def test_window_gauges_from_a_snapshot(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    good = fakes.start("good", FakeBehavior(ttft_s=FIRST_TOKEN_S, output_tokens=ANSWER_TOKENS, tokens_per_s=500))
    config = gateway_config([good])
    gateway = start_gateway(config)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    for _ in range(3):
        for _chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass
    wait_until(lambda: len(gateway.samples.samples) == 3, 10)

    # A scrape reads the gateway's own stats window.
    series = scrape(gateway)
    labels = {"model": "m", "provider": "good", "deployment": "good"}
    assert value(series, "gateway_window_samples", **labels) == 3
    assert value(series, "gateway_window_success_ratio", **labels) == 1
    p50 = value(series, "gateway_window_ttft_seconds", **labels, q="0.5")
    p95 = value(series, "gateway_window_ttft_seconds", **labels, q="0.95")
    assert p50 is not None and p95 is not None and FIRST_TOKEN_S * 0.98 <= p50 <= p95
    assert value(series, "gateway_window_tokens_per_second", **labels, q="0.05") is not None

    # A deployment gone from the window loses its series (no stale gauges).
    metrics = Metrics(process_metrics=False)
    metrics.observe_snapshot(StatsSnapshot.from_samples(gateway.samples.samples), deployment_providers(config))
    assert metrics.registry.get_sample_value("gateway_window_samples", labels) == 3
    metrics.observe_snapshot(StatsSnapshot())
    assert metrics.registry.get_sample_value("gateway_window_samples", labels) is None


def test_openmetrics_when_the_scraper_asks(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    gateway = start_gateway(gateway_config([fakes.start("good")]))
    response = httpx.get(gateway.url + "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    names = {family.name for family in parse_openmetrics(response.text)}  # type: ignore[no-untyped-call]
    assert {"gateway_requests", "gateway_ttft_seconds", "gateway_build_info"} <= names


def test_hooks_for_router_and_stats() -> None:
    # Metrics is a GatewayEvents listener: the router and the relay tell it each event directly.
    metrics = Metrics(process_metrics=False)
    get = metrics.registry.get_sample_value
    metrics.committed("m", "groq", "groq", "explore")
    metrics.hedge_ended("m", "groq", "groq", "won", True)
    metrics.hedge_ended("m", "together", "together", "lost", False)
    metrics.fallback("m", "together", "together", "groq")
    assert get("gateway_routing_decisions_total", {"model": "m", "provider": "groq", "reason": "explore"}) == 1
    assert get("gateway_hedges_total", {"model": "m", "provider": "groq", "result": "won"}) == 1
    assert get("gateway_hedges_total", {"model": "m", "provider": "together", "result": "lost"}) == 1
    assert get("gateway_fallbacks_total", {"model": "m", "provider": "together"}) == 1

    metrics.set_circuit_state("groq", "open")
    assert get("gateway_circuit_state", {"provider": "groq", "state": "open"}) == 1
    assert get("gateway_circuit_state", {"provider": "groq", "state": "closed"}) == 0
    metrics.set_circuit_state("groq", "half_open")
    assert get("gateway_circuit_state", {"provider": "groq", "state": "open"}) == 0
    assert get("gateway_circuit_state", {"provider": "groq", "state": "half_open"}) == 1

    metrics.set_stats_backend("redis", False)
    assert get("gateway_stats_backend_healthy", {"backend": "redis"}) == 0
    metrics.samples_dropped(2)
    metrics.observe_dropped_total(5)  # a running total: only the difference is added
    metrics.observe_dropped_total(5)
    assert get("gateway_stats_samples_dropped_total") == 5

    metrics.attempt_started("m", "groq", "groq")
    metrics.attempt_started("m", "groq", "groq")
    metrics.attempt_ended("m", "groq", "groq")
    assert get("gateway_inflight_requests", {"provider": "groq"}) == 1


def test_every_series_the_config_bounds_exists_before_any_traffic(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    gateway = start_gateway(gateway_config([a, b]))
    series = scrape(gateway)  # no request sent yet
    for provider in ("a", "b"):
        pair = {"model": "m", "provider": provider}
        assert value(series, "gateway_fallbacks_total", **pair) == 0
        assert value(series, "gateway_hedges_total", **pair, result="won") == 0
        assert value(series, "gateway_hedges_total", **pair, result="lost") == 0
        assert value(series, "gateway_stream_breaks_total", **pair, result="recovered") == 0
        assert value(series, "gateway_routing_decisions_total", **pair, reason="hedge") == 0
        assert value(series, "gateway_upstream_requests_total", **pair, outcome="timeout") == 0
        assert value(series, "gateway_requests_total", **pair, status_class="5xx") == 0
        assert value(series, "gateway_tokens_total", **pair, type="output") == 0
        assert value(series, "gateway_cost_usd_total", **pair) == 0
        assert value(series, "gateway_circuit_state", provider=provider, state="closed") == 1
        assert value(series, "gateway_circuit_state", provider=provider, state="open") == 0
        assert value(series, "gateway_circuit_state", provider=provider, state="half_open") == 0
        assert value(series, "gateway_inflight_requests", provider=provider) == 0
    # Only pairs the config deploys: no model × provider cross product beyond it.
    assert value(series, "gateway_fallbacks_total", model="m", provider="") is None


def test_prepare_on_reload_adds_new_series_and_keeps_circuit_states() -> None:
    metrics = Metrics(process_metrics=False)
    get = metrics.registry.get_sample_value
    first = _two_model_config(["a"])
    metrics.prepare(first)
    metrics.set_circuit_state("a", "open")
    metrics.hedge_ended("m", "a", "a", "won", True)
    metrics.prepare(_two_model_config(["a", "b"]))  # a reload that adds provider b
    assert get("gateway_circuit_state", {"provider": "a", "state": "open"}) == 1  # not reset to closed
    assert get("gateway_circuit_state", {"provider": "b", "state": "closed"}) == 1
    assert get("gateway_hedges_total", {"model": "m", "provider": "a", "result": "won"}) == 1  # not reset
    assert get("gateway_hedges_total", {"model": "n", "provider": "b", "result": "lost"}) == 0
    assert get("gateway_provider_max_concurrency", {"provider": "b"}) == 8


def _two_model_config(providers: list[str]) -> GatewayConfig:
    return parse_config(
        {
            "providers": [{"name": p, "base_url": f"http://127.0.0.1:9/{p}", "max_concurrency": 8} for p in providers],
            "models": [
                {"name": name, "deployments": [{"provider": p, "model": "x"} for p in providers]} for name in ("m", "n")
            ],
        },
        source="t.toml",
    )


def test_tokens_per_second_buckets_reach_what_fast_providers_and_mocks_stream() -> None:
    # The seeds list 3,502 tok/s medians and a local mock streams ~36k: both below the top finite bucket.
    assert TPS_BUCKETS[-1] >= 50_000 and list(TPS_BUCKETS) == sorted(TPS_BUCKETS)
    metrics = Metrics(process_metrics=False)
    for speed in (3_502.0, 36_000.0):
        metrics.record(
            Sample(model="m", deployment="d", provider="p", endpoint="chat", stream=True, outcome="ok",
                   started_at=0.0, tokens_per_s=speed)
        )  # fmt: skip
    get = metrics.registry.get_sample_value
    labels = {"model": "m", "provider": "p"}
    assert get("gateway_tokens_per_second_bucket", {**labels, "le": "5000.0"}) == 1
    assert get("gateway_tokens_per_second_bucket", {**labels, "le": "50000.0"}) == 2


def test_failed_attempt_counts_no_latency_and_no_cost() -> None:
    metrics = Metrics(process_metrics=False)
    sample = Sample(
        model="m",
        deployment="d",
        provider="p",
        endpoint="chat",
        stream=True,
        outcome="timeout",
        started_at=0.0,
        e2e_s=30.0,
        prompt_tokens_estimate=100,
    )
    metrics.record(sample)
    get = metrics.registry.get_sample_value
    assert get("gateway_upstream_requests_total", {"model": "m", "provider": "p", "outcome": "timeout"}) == 1
    assert get("gateway_end_to_end_seconds_count", {"model": "m", "provider": "p"}) is None
    assert get("gateway_tokens_total", {"model": "m", "provider": "p", "type": "input"}) is None
    assert get("gateway_cost_usd_total", {"model": "m", "provider": "p"}) is None


def test_registries_are_private() -> None:
    # Two apps in one process must not share or collide (the global registry is never used).
    first, second = Metrics(), Metrics()
    first.attempt_started("m", "p", "p")
    assert second.registry.get_sample_value("gateway_inflight_requests", {"provider": "p"}) is None


def test_multiprocess_mode_is_refused_outside_the_gateways_own_workers(fakes: Fakes) -> None:
    config = gateway_config([fakes.start("good")])
    with pytest.raises(ConfigError, match="not a worker of `gateway serve --workers N`"):
        create_app(config, AppOptions(environ={"PROMETHEUS_MULTIPROC_DIR": "/tmp/prom"}))


def _good_2xx() -> dict[str, str]:
    return {"model": "m", "provider": "good", "status_class": "2xx"}


def _version() -> str:
    from gateway import __version__

    return __version__
