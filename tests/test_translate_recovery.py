"""Mid-stream recovery of translated streams: a Messages client's answer from a chat-only deployment that breaks
is finished by a ``continue_prefill`` chat deployment, the client reading one message through the anthropic SDK."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
WHOLE = "".join(answer_words(0, 8))


@pytest.mark.parametrize("prefill_format", ["plain", "prefix", "vllm"])
def test_a_broken_translated_stream_is_finished_on_a_continue_prefill_deployment(
    fakes: Fakes, start_gateway: StartGateway, prefill_format: str
) -> None:
    broken = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    healthy = fakes.start("b", FakeBehavior(output_tokens=8), record=True)
    config = gateway_config(
        [broken, healthy],
        policy={"first_token_timeout_s": 2.0, "idle_timeout_s": 0.3},
        provider_options={"a": {"apis": ["chat"]}, "b": {"apis": ["chat"]}},
        deployments={"b": {"continue_prefill": True, "prefill_format": prefill_format}},
    )
    gateway = start_gateway(config)
    client = anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10)
    with client.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    client.close()
    assert text == WHOLE
    assert [b.type for b in final.content] == ["text"] and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 8  # the whole answer: the earlier part moved from the prompt to the output
    # The continuation asked the chat deployment for the rest, marked as it wants a prefill marked.
    sent = healthy.app.state.recorded[-1].body
    assert sent is not None
    last = sent["messages"][-1]
    assert last["role"] == "assistant" and last["content"] == "".join(answer_words(0, 3))
    assert last.get("prefix") is (True if prefill_format == "prefix" else None)
    assert sent.get("continue_final_message") is (True if prefill_format == "vllm" else None)
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [(s.deployment, s.outcome) for s in gateway.samples.samples] == [("a", "broken_stream"), ("b", "ok")]


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.mark.parametrize(
    "fault", [FakeBehavior(output_tokens=8, error_event_after=2), FakeBehavior(output_tokens=8, drop_after=2)]
)
def test_a_translated_stream_that_cannot_be_finished_ends_with_the_clients_error_event(
    fakes: Fakes, start_gateway: StartGateway, fault: FakeBehavior
) -> None:
    chat = fakes.start("a", fault)
    config = gateway_config(
        [chat], policy={"first_token_timeout_s": 2.0, "idle_timeout_s": 0.3}, provider_options={"a": {"apis": ["chat"]}}
    )
    gateway = start_gateway(config)
    ask = {"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    messages = _events(httpx.post(gateway.base_url + "/messages", json=ask, timeout=10).text)
    assert [name for name, _ in messages][:2] == ["message_start", "content_block_start"]
    assert messages[-1][0] == "error" and messages[-1][1]["error"]["type"] == "api_error"
    assert "message_stop" not in [name for name, _ in messages]
    responses = _events(
        httpx.post(gateway.base_url + "/responses", json={"model": "m", "input": "hi", "stream": True}, timeout=10).text
    )
    numbers = [data["sequence_number"] for _, data in responses]
    assert numbers == list(range(len(numbers)))  # the error event takes the next number
    assert responses[-1][0] == "error" and "response.completed" not in [name for name, _ in responses]
