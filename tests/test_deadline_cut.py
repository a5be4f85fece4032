"""A stream cut by the request's own total deadline, over real loopback HTTP with the SDKs as clients.

A provider still streaming at its pace when the deadline comes served well: the answer was only longer than the
request allowed. The cut ends the client's stream with an error event in its API's shape (code
``deadline_exceeded``), and is recorded as ``deadline``: neither the provider's success rate nor its circuit pays
for it, and its first token and speed so far are kept. A provider that went silent before the deadline stalled:
that cut is its ``timeout``, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.samples import Sample
from tests.support.access import access_lines
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
HI: Any = [{"role": "user", "content": "hi"}]
APIS = {"a": {"apis": ["chat", "responses", "messages"]}}
LONG = FakeBehavior(output_tokens=4000, tokens_per_s=100)
"""40 s of answer at a steady pace: far past the deadlines below."""


def _one_sample(gateway: Gateway) -> Sample:
    wait_until(lambda: len(gateway.samples.samples) >= 1, what="the attempt's sample")
    (sample,) = gateway.samples.samples
    return sample


def _ask(gateway: Gateway, api: str) -> tuple[str, dict[str, Any]]:
    """Stream one answer through ``api``'s SDK until the stream ends: the text received and the error that ended it."""
    pieces: list[str] = []
    event: Any
    if api == "chat":
        client = sdk(gateway.base_url)
        with pytest.raises(openai.APIError) as chat_error:
            for chunk in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
                pieces += [c.delta.content or "" for c in chunk.choices]
        client.close()
        body: Any = chat_error.value.body
        return "".join(pieces), {"code": body["code"], "message": body["message"]}
    if api == "responses":
        client = sdk(gateway.base_url)
        events: list[Any] = list(client.responses.create(model="m", input="hi", stream=True))
        client.close()
        pieces = [e.delta for e in events if e.type == "response.output_text.delta"]
        last = events[-1]
        assert last.type == "error"
        return "".join(pieces), {"code": last.code, "message": last.message}
    url = gateway.base_url.removesuffix("/v1")
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as claude:
        with pytest.raises(anthropic.APIStatusError) as messages_error:
            for event in claude.messages.create(model="m", max_tokens=8000, messages=HI, stream=True):
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    pieces.append(event.delta.text)
        error: Any = messages_error.value.body
        return "".join(pieces), {"code": error["error"]["type"], "message": error["error"]["message"]}


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_stream_longer_than_the_deadline_is_cut_without_counting_against_its_provider(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture, api: str
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    fake = fakes.start("a", LONG)
    gateway = start_gateway(gateway_config([fake], policy={"total_timeout_s": 1.0}, provider_options=APIS))
    text, error = _ask(gateway, api)
    assert text  # the answer so far reached the client before the cut
    assert "total deadline" in error["message"] and "a was still sending it" in error["message"]
    if api != "messages":  # Anthropic's error events carry a type, not a code
        assert error["code"] == "deadline_exceeded"
    sample = _one_sample(gateway)
    assert sample.outcome == "deadline"
    assert sample.ttft_s is not None and sample.tokens_per_s is not None  # its speed so far is kept
    router = gateway.runtime.router
    assert router.state.health.circuits.get(("m", "a")) is None  # neither a failure nor a success for the circuit
    summary = gateway.runtime.stats.snapshot().get("m", "a")
    assert summary is not None and summary.attempts == 0 and summary.success_rate() is None
    assert summary.count("tokens_per_s") == 1
    metric = gateway.metrics.registry.get_sample_value
    labels = {"model": "m", "provider": "a"}
    assert metric("gateway_upstream_requests_total", {**labels, "outcome": "deadline"}) == 1
    assert metric("gateway_upstream_requests_total", {**labels, "outcome": "timeout"}) == 0
    (line,) = access_lines(caplog, 1)
    assert line["outcome"] == "deadline" and line["status"] == 200


def test_a_provider_silent_until_the_deadline_still_timed_out(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    # Three chunks, then nothing: the deadline (1 s) comes long after the healthy gap (0.2 s) was over.
    fake = fakes.start("a", FakeBehavior(output_tokens=4000, stall_after=3, stall_s=30))
    policy = {"total_timeout_s": 1.0, "deadline_floor_s": 0.2}
    gateway = start_gateway(gateway_config([fake], policy=policy))
    client = sdk(gateway.base_url)
    with pytest.raises(openai.APIError) as broken:
        for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
    client.close()
    body: Any = broken.value.body
    assert body["code"] == "upstream_stream_broken"
    assert _one_sample(gateway).outcome == "timeout"
    circuit = gateway.runtime.router.state.health.circuits[("m", "a")]
    assert circuit.failures == 1
    (line,) = access_lines(caplog, 1)
    assert line["outcome"] == "timeout"
