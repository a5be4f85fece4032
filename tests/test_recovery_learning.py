"""After a mid-stream recovery: usage that adds up, refusals learned; and health that blames correctly.

On real loopback servers: ``a`` breaks after 3 of 8 words, ``b`` (marked ``continue_prefill``)
continues the answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
POLICY = {"extends": "fixed-order", "first_token_timeout_s": 5.0, "idle_timeout_s": 5.0}
BODY = {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}


def events(body: bytes) -> list[Any]:
    return [json.loads(b[6:]) for b in body.split(b"\n\n") if b.startswith(b"data: {")]


def test_usage_after_a_recovery_covers_the_whole_answer(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    a, b = (
        fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3)),
        fakes.start("b", FakeBehavior(output_tokens=8)),
    )
    gateway = start_gateway(gateway_config([a, b], policy=POLICY, deployments={"b": {"continue_prefill": True}}))
    response = httpx.post(gateway.base_url + "/chat/completions", json=BODY, timeout=10)
    usage = next(e["usage"] for e in events(response.content) if e.get("usage"))
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts' samples")
    first, second = gateway.samples.samples
    assert (first.output_tokens, second.output_tokens) == (3, 5)
    assert second.usage_prompt_tokens is not None and second.usage_completion_tokens == 5  # b billed the prefill
    assert usage["completion_tokens"] == 8  # a's 3 words and b's 5
    assert usage["prompt_tokens"] == second.usage_prompt_tokens - 3  # the original prompt, the prefill out of it
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    wait_until(lambda: any(r.name == "gateway.access" for r in caplog.records), what="the access log line")
    line = next(json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access")
    assert (line["input_tokens"], line["output_tokens"]) == (usage["prompt_tokens"], 8)
    assert line["cost_usd"] == pytest.approx(sum(s.cost_usd or 0.0 for s in (first, second)))


def test_a_refused_continuation_is_learned_and_logged_once(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway")
    a = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    b = fakes.start("b", FakeBehavior(output_tokens=8, reject_prefill=True))
    c = fakes.start("c", FakeBehavior(output_tokens=8))
    capable = {"continue_prefill": True}
    gateway = start_gateway(gateway_config([a, b, c], policy=POLICY, deployments={"b": capable, "c": capable}))
    for _ in range(3):
        response = httpx.post(gateway.base_url + "/chat/completions", json=BODY, timeout=10)
        assert response.content.endswith(b"data: [DONE]\n\n")
    assert b.app.state.requests == 1  # refused once, then not asked to continue again
    assert c.app.state.requests == 3
    warnings = [r.getMessage() for r in caplog.records if "not continuable" in r.getMessage()]
    assert len(warnings) == 1 and "b" in warnings[0]


def test_a_completed_stream_with_a_malformed_event_is_not_a_health_failure(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    odd = fakes.start("a", FakeBehavior(output_tokens=8, malformed_after=2))
    gateway = start_gateway(gateway_config([odd, fakes.start("b")], policy={**POLICY, "failure_threshold": 1}))
    for _ in range(2):
        response = httpx.post(gateway.base_url + "/chat/completions", json=BODY, timeout=10)
        assert response.headers["x-gateway-provider"] == "a"  # no circuit opened by it
    wait_until(lambda: len(gateway.samples.samples) == 2, what="the samples")
    assert [s.outcome for s in gateway.samples.samples] == ["ok", "ok"]
    counted = gateway.metrics.registry.get_sample_value(
        "gateway_malformed_events_total", {"model": "m", "provider": "a"}
    )
    assert counted == 2
