"""Validity through the gateway: every answer of each API gets its verdict in its Sample, by its request's kind.

The fake provider answers with a forced quality fault (``fake.fault`` in the request body, which the
gateway relays untouched); the client gets exactly what the fake sent, and the sample says why it is
invalid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.leaderboard import leaderboard, render_compact, render_table
from gateway.samples import Sample
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def body(
    api: str, *, stream: bool, tools: bool = False, fault: str | None = None, tools_value: object = None, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "m", "stream": stream, **extra}
    if tools_value is not None:
        out["tools"] = tools_value
    if api == "responses":
        out["input"] = "weather?"
    else:
        out.update(messages=[{"role": "user", "content": "weather?"}], max_tokens=200)
    if tools:
        out["tools"] = {
            "chat": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
            "responses": [{"type": "function", "name": "get_weather", "parameters": WEATHER}],
            "messages": [{"name": "get_weather", "input_schema": WEATHER}],
        }[api]
    if fault is not None:
        out["fake"] = {"fault": fault, "output_tokens": 48}
    return out


def sent(gateway: Gateway, api: str, payload: dict[str, Any]) -> httpx.Response:
    headers = {"anthropic-version": "2023-06-01"} if api == "messages" else {}
    response = httpx.post(gateway.base_url + PATHS[api], json=payload, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response


def arguments_of(api: str, answer: dict[str, Any]) -> str:
    if api == "chat":
        return str(answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    return str(next(item for item in answer["output"] if item["type"] == "function_call")["arguments"])


def last_sample(gateway: Gateway, count: int) -> Sample:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    return gateway.samples.samples[count - 1]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_every_answer_gets_a_verdict_by_its_kind(api: str, fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=12))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": [api]}}))
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"tools": True}, "tools", "valid"),
        ({"tools": True, "fault": "invalid_tool_json"}, "tools", "tool_args_not_json"),
        ({}, "plain", "valid"),
        ({"fault": "empty"}, "plain", "empty"),
        ({"fault": "repeat"}, "plain", "degenerate"),
    ]
    count = 0
    for stream in (True, False):
        for options, kind, verdict in cases:
            response = sent(gateway, api, body(api, stream=stream, **options))
            count += 1
            sample = last_sample(gateway, count)
            if api == "messages" and not stream and verdict == "tool_args_not_json":
                verdict = "tool_args_schema"  # a whole Messages body carries broken input as a string, not an object
            assert (sample.kind, sample.validity, sample.outcome) == (kind, verdict, "ok"), (stream, options)
            if options.get("fault") == "invalid_tool_json" and not stream and api != "messages":
                # Never rescued: the client has the broken arguments as the provider sent them.
                arguments = arguments_of(api, response.json())
                assert arguments.startswith('{"city": "') and not arguments.endswith("}")
    summary = gateway.runtime.stats.snapshot().get("m", "a")
    assert summary is not None
    assert summary.valid_counts("tools") == (2, 4) and summary.valid_counts("plain") == (2, 6)
    assert summary.top_reason("plain") in ("empty", "degenerate")


def test_failures_and_embeddings_are_not_judged(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=4))
    gateway = start_gateway(gateway_config([fake]))
    httpx.post(gateway.base_url + "/embeddings", json={"model": "m", "input": "x"}, timeout=30)
    sample = last_sample(gateway, 1)
    assert (sample.kind, sample.validity) == (None, None)
    payload = body("chat", stream=False, fake={"status": 500})
    assert httpx.post(gateway.base_url + "/chat/completions", json=payload, timeout=30).status_code >= 500
    wait_until(lambda: len(gateway.samples.samples) >= 2)
    assert all(s.validity is None for s in gateway.samples.samples[1:])


def test_shown_in_metrics_access_log_leaderboard_trace_and_stats_table(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    fake = fakes.start("a", FakeBehavior(output_tokens=12))
    gateway = start_gateway(gateway_config([fake]))
    trace = {"x-gateway-trace": "1"}
    for fault in ("invalid_tool_json", "invalid_tool_json", None):
        payload = body("chat", stream=False, tools=True, fault=fault)
        response = httpx.post(gateway.base_url + "/chat/completions", json=payload, headers=trace, timeout=30)
    last_sample(gateway, 3)
    # The kept trace (the header left before the answer was judged) holds each attempt's verdict.
    kept = gateway.runtime.traces.get(response.headers["x-request-id"])
    assert kept is not None and kept[1]["a"][-1]["v"] == "valid" and kept[1]["shape"]["kind"] == "tools"
    broken = {"model": "m", "deployment": "a", "reason": "tool_args_not_json"}
    assert gateway.metrics.registry.get_sample_value("gateway_invalid_answers_total", broken) == 2
    empty = {"model": "m", "deployment": "a", "reason": "empty"}
    assert gateway.metrics.registry.get_sample_value("gateway_invalid_answers_total", empty) == 0  # at zero
    wait_until(lambda: len(access_lines(caplog)) == 3)
    assert [line["validity"] for line in access_lines(caplog)] == ["tool_args_not_json", "tool_args_not_json", "valid"]
    (row,) = httpx.get(gateway.base_url + "/gateway/stats", timeout=30).json()["data"]
    assert row["valid_rate"] == pytest.approx(1 / 3) and row["valid_rate_tools"] == pytest.approx(1 / 3)
    assert row["valid_rate_plain"] is None and row["invalid_reason"] == "tool_args_not_json"
    rows = leaderboard(gateway.runtime.stats.snapshot(), gateway.runtime.config.models)
    assert "33.3% tool_args_not_json" in render_table(rows)
    assert "33.3% tool_args…" in render_compact(rows)


def test_malformed_tools_are_relayed_not_a_crash(fakes: Fakes, start_gateway: StartGateway) -> None:
    """What a request declares is read leniently: a ``tools`` that is no list is refused by the request's shape
    check (400 naming it); a list with odd entries is the provider's to judge, and its answer is judged without
    a crash."""
    fake = fakes.start("a", FakeBehavior(output_tokens=4))
    gateway = start_gateway(gateway_config([fake]))
    for scalar in (5, "x"):
        payload = body("chat", stream=False, tools=False, tools_value=scalar)
        response = httpx.post(gateway.base_url + "/chat/completions", json=payload, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == "tools", (scalar, response.text)
    for tools in ([5, {"function": 3}], [{"type": "function", "function": {"name": "f", "parameters": 7}}]):
        payload = body("chat", stream=False, tools=False, tools_value=tools)
        response = httpx.post(gateway.base_url + "/chat/completions", json=payload, timeout=30)
        assert response.status_code == 200, (tools, response.text)
