"""OpenTelemetry's GenAI client metrics: off by default, and when on, Prometheus series that parse with
prometheus-client's own parser, carry the conventions' attribute names and bucket boundaries, and
count every attempt (a fallback is two operations)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.fakes import FakeBehavior
from gateway.metrics.genai import DURATION_BUCKETS, TOKEN_BUCKETS
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

NAMES = {
    "gen_ai_client_operation_duration_seconds": DURATION_BUCKETS,
    "gen_ai_client_operation_time_to_first_chunk_seconds": DURATION_BUCKETS,
    "gen_ai_client_operation_time_per_output_chunk_seconds": DURATION_BUCKETS,
    "gen_ai_client_token_usage": TOKEN_BUCKETS,
}


def scrape(gateway: Gateway) -> dict[str, Any]:
    text = httpx.get(gateway.url + "/metrics", timeout=10).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_genai_series_follow_the_conventions(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    a, b = fakes.start("a", FakeBehavior(status=503)), fakes.start("b", FakeBehavior(output_tokens=12))
    gateway = start_gateway(gateway_config([a, b], extra={"metrics": {"otel_genai": True}}))
    with sdk(gateway.base_url) as client:
        stream = client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    failed, answered = gateway.samples.samples
    families = scrape(gateway)
    for name, buckets in NAMES.items():
        assert families[name].type == "histogram", name
        bounds = sorted({float(s.labels["le"]) for s in families[name].samples if s.name.endswith("_bucket")})
        assert bounds == [*map(float, buckets), float("inf")], name
    host, port = b.url.removeprefix("http://").split(":")

    def value(name: str, suffix: str, **labels: str) -> float:
        wanted = {"gen_ai_operation_name": "chat", "gen_ai_request_model": "b-upstream", "gen_ai_provider_name": "b"}
        wanted.update(server_address=host, server_port=port, **labels)
        found = [s.value for s in families[name].samples if s.name == name + suffix and s.labels == wanted]
        assert len(found) == 1, (name, wanted, families[name].samples)
        return float(found[0])

    assert value("gen_ai_client_operation_duration_seconds", "_count", error_type="") == 1
    duration = [s for s in families["gen_ai_client_operation_duration_seconds"].samples if s.name.endswith("_count")]
    assert {s.labels["gen_ai_provider_name"]: s.labels["error_type"] for s in duration} == {"a": "503", "b": ""}
    assert value("gen_ai_client_operation_time_to_first_chunk_seconds", "_count") == 1
    assert value("gen_ai_client_operation_time_to_first_chunk_seconds", "_sum") == answered.ttft_s
    gaps = len(answered.chunk_gaps_s)
    assert gaps >= 11, "a gap after each of the 12 one-token chunks but the first"
    assert value("gen_ai_client_operation_time_per_output_chunk_seconds", "_count") == gaps
    assert (
        value("gen_ai_client_token_usage", "_sum", gen_ai_token_type="output") == answered.usage_completion_tokens == 12
    )
    assert value("gen_ai_client_token_usage", "_sum", gen_ai_token_type="input") == answered.usage_prompt_tokens
    assert failed.cost_usd is None
    # The gateway's own series are all still there: the shipped dashboard reads those, with either setting.
    dashboard = (Path(__file__).parents[1] / "deploy" / "grafana" / "dashboards" / "gateway.json").read_text()
    used = {re.sub(r"_(bucket|count|sum|total)$", "", name) for name in re.findall(r"\bgateway_[a-z0-9_]+", dashboard)}
    assert len(used) > 10 and used <= set(families), sorted(used - set(families))


def test_responses_and_messages_are_chat_operations(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=5))
    config = gateway_config(
        [fake],
        provider_options={"a": {"apis": ["chat", "responses", "messages"]}},
        extra={"metrics": {"otel_genai": True}},
    )
    gateway = start_gateway(config)
    with sdk(gateway.base_url) as client:
        assert client.responses.create(model="m", input="hi").output_text
    answer = httpx.post(
        gateway.url + "/v1/messages",
        headers={"x-api-key": "client-key", "anthropic-version": "2023-06-01"},
        json={"model": "m", "max_tokens": 16, "messages": MESSAGES},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    assert [s.endpoint for s in gateway.samples.samples] == ["responses", "messages"]
    durations = [
        s for s in scrape(gateway)["gen_ai_client_operation_duration_seconds"].samples if s.name.endswith("_count")
    ]
    assert [(s.labels["gen_ai_operation_name"], s.value) for s in durations] == [("chat", 2.0)]


def test_genai_series_are_off_by_default(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a")]))
    with sdk(gateway.base_url) as client:
        assert client.chat.completions.create(model="m", messages=MESSAGES).choices
    assert not [name for name in scrape(gateway) if name.startswith("gen_ai_")]
