"""Translated answers from a provider that reports no usage carry the gateway's own counts.

Some OpenAI-compatible servers (Ollama's ``/v1``, some llama.cpp builds) send no ``usage``. A Messages or Responses
client served by translation must still see how big its prompt was (Claude Code decides when to compact from
``input_tokens``): the gateway shows what it counted itself, the same figures its access log records (a whole
answer says so in ``x-gateway-count: estimated``, as ``count_tokens`` does), and never in place of a usage the
provider did report. The upstream is a ``ScriptedUpstream`` (chat only, the one deployment),
so every Messages and Responses request is translated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.support.access import access_lines
from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream, scripted_behind_gateway
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
HEAD = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up"}
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
PROMPT = "Tell me, in a few words, what the weather is usually like in Lisbon in the spring."
ANSWER = ["Mild and ", "sunny, with ", "the odd shower."]
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": PROMPT}]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> tuple[None, dict[str, Any]]:
    return None, {**HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}


def stream(usage: dict[str, Any] | None = None) -> list[tuple[str | None, Any]]:
    """The answer streamed as such a server does: no usage chunk, unless ``usage`` is given."""
    last = chunk({}, "stop", usage=usage) if usage is not None else chunk({}, "stop")
    deltas = [chunk({"content": text}) for text in ANSWER]
    return [chunk({"role": "assistant", "content": ""}), *deltas, last, (None, "[DONE]")]


def whole(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": "".join(ANSWER)}
    body: dict[str, Any] = {**HEAD, "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    body["choices"][0]["finish_reason"] = "stop"
    return {**body, "usage": usage} if usage is not None else body


@pytest.fixture
def upstream(
    test_servers: list[ServerThread], start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[ScriptedUpstream, Gateway]]:
    caplog.set_level(logging.INFO, logger="gateway.access")
    yield scripted_behind_gateway(test_servers, start_gateway, "up", "chat")


def counted(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    """The request's input and output tokens as the access log has them, counted by the gateway."""
    line = access_lines(caplog, 1)[-1]
    assert line["usage_source"] == "gateway_tokenizer"
    assert line["input_tokens"] > 0 and line["output_tokens"] > 0
    return line["input_tokens"], line["output_tokens"]


def claude(gateway: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10)


def test_a_messages_stream_without_usage_shows_the_gateways_counts(
    upstream: tuple[ScriptedUpstream, Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    scripted, gateway = upstream
    scripted.answer_sse(stream())
    with claude(gateway) as client, client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as events:
        started = [e.message.usage.input_tokens for e in events if e.type == "message_start"]
        message = events.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "".join(ANSWER)
    assert (message.usage.input_tokens, message.usage.output_tokens) == counted(caplog)
    # Written before any count: the request's size estimate, made at intake.
    assert started == [gateway.samples.samples[0].prompt_tokens_estimate] and started[0] > 0


def test_a_whole_messages_answer_without_usage_shows_the_gateways_counts(
    upstream: tuple[ScriptedUpstream, Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    scripted, gateway = upstream
    scripted.answer_json(whole())
    with claude(gateway) as client:
        raw = client.messages.with_raw_response.create(model="m", max_tokens=64, messages=MESSAGES)
    message = raw.parse()
    assert (message.usage.input_tokens, message.usage.output_tokens) == counted(caplog)
    assert raw.headers.get("x-gateway-count") == "estimated"  # as count_tokens marks the gateway's own count


def test_responses_without_usage_show_the_gateways_counts(
    upstream: tuple[ScriptedUpstream, Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    scripted, gateway = upstream
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        scripted.answer_sse(stream())
        with client.responses.stream(model="m", input=PROMPT) as events:
            streamed = events.get_final_response().usage
        assert streamed is not None
        assert (streamed.input_tokens, streamed.output_tokens) == counted(caplog)
        caplog.clear()
        scripted.answer_json(whole())
        answered = client.responses.create(model="m", input=PROMPT).usage
    assert answered is not None
    assert (answered.input_tokens, answered.output_tokens) == counted(caplog)


def test_a_providers_usage_is_never_replaced(
    upstream: tuple[ScriptedUpstream, Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    scripted, gateway = upstream
    with claude(gateway) as client:
        scripted.answer_sse(stream(USAGE))
        with client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as events:
            streamed = events.get_final_message().usage
        scripted.answer_json(whole(USAGE))
        raw = client.messages.with_raw_response.create(model="m", max_tokens=64, messages=MESSAGES)
    answered = raw.parse().usage
    assert "x-gateway-count" not in raw.headers
    assert (streamed.input_tokens, streamed.output_tokens) == (11, 3)
    assert (answered.input_tokens, answered.output_tokens) == (11, 3)
    assert [line["usage_source"] for line in access_lines(caplog, 2)] == ["provider", "provider"]
