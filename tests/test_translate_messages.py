"""Messages API clients on chat-only deployments: the real ``anthropic`` SDK, create and stream, tools with a
round trip, thinking, a system prompt and images, each answer the same as the Messages-native fake gives."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
TOOLS: list[anthropic.types.ToolParam] = [
    {
        "name": "lookup",
        "description": "Look a word up",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    }
]
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture
def clients() -> Iterator[Callable[[str], anthropic.Anthropic]]:
    made: list[anthropic.Anthropic] = []

    def make(base_url: str) -> anthropic.Anthropic:
        made.append(anthropic.Anthropic(base_url=base_url, api_key="client-key", max_retries=0, timeout=10))
        return made[-1]

    yield make
    for client in made:
        client.close()


def pair(
    fakes: Fakes, start_gateway: StartGateway, behavior: FakeBehavior
) -> tuple[Gateway, Gateway, FakeServer, FakeServer]:
    """One gateway whose only deployment is a chat-only fake, one whose only deployment speaks Messages natively."""
    chat = fakes.start("chat", behavior, record=True)
    native = fakes.start("native", behavior, record=True)
    translated = start_gateway(gateway_config([chat], provider_options={"chat": {"apis": ["chat"]}}))
    direct = start_gateway(gateway_config([native], provider_options={"native": {"apis": ["messages"]}}))
    return translated, direct, chat, native


def test_create_and_stream_text_as_natively(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], anthropic.Anthropic]
) -> None:
    translated, direct, chat, _ = pair(fakes, start_gateway, FakeBehavior(output_tokens=6))
    answers = []
    for gateway in (translated, direct):
        client = clients(gateway.url)
        whole = client.messages.create(
            model="m", max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": "hi"}]
        )
        with client.messages.stream(
            model="m", max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        answers.append((whole, streamed, final))
    (whole, streamed, final), (native_whole, native_streamed, native_final) = answers
    text = "".join(answer_words(0, 6))
    assert streamed == native_streamed == text
    assert [b.model_dump() for b in whole.content] == [b.model_dump() for b in native_whole.content]
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in native_final.content]
    assert whole.stop_reason == final.stop_reason == native_final.stop_reason == "end_turn"
    assert whole.usage.output_tokens == final.usage.output_tokens == 6
    assert final.usage.input_tokens > 0  # the chat upstream's prompt, reported at the end
    # The chat fake got a chat request: the system prompt first, the stream's usage asked for.
    sent = chat.app.state.recorded[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body is not None and sent.body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent.body["stream_options"] == {"include_usage": True} and sent.body["max_tokens"] == 64
    # Measured as the deployment's own traffic: the sample is the chat deployment's, tokens counted.
    wait_until(lambda: len(translated.samples.samples) == 2, what="both answers recorded")
    sample = translated.samples.samples[-1]
    assert sample.deployment == "chat" and sample.outcome == "ok" and sample.output_tokens == 6


def test_tool_round_trip_streamed_as_natively(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], anthropic.Anthropic]
) -> None:
    behavior = FakeBehavior(output_tokens=4, tool_call=True)
    translated, direct, chat, _ = pair(fakes, start_gateway, behavior)
    finals = []
    for gateway in (translated, direct):
        client = clients(gateway.url)
        messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "look up the fox"}]
        with client.messages.stream(model="m", max_tokens=64, tools=TOOLS, messages=messages) as stream:
            final = stream.get_final_message()
        finals.append(final)
    final, native = finals
    assert final.stop_reason == native.stop_reason == "tool_use"
    call, native_call = final.content[-1], native.content[-1]
    assert call.type == native_call.type == "tool_use"
    assert call.type == "tool_use" and native_call.type == "tool_use"
    assert (
        (call.name, call.input)
        == (native_call.name, native_call.input)
        == ("lookup", {"q": "".join(answer_words(0, 4))})
    )
    # The tool's result goes back, marked as an error: the chat upstream gets the call and its result, ids kept.
    client = clients(translated.url)
    follow: list[Any] = [
        {"role": "user", "content": "look up the fox"},
        {"role": "assistant", "content": [c.model_dump() for c in final.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "no such word", "is_error": True}],
        },
    ]
    answer = client.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=follow)
    assert answer.stop_reason == "tool_use"
    sent = chat.app.state.recorded[-1].body
    assert sent is not None
    assert sent["tools"][0]["function"]["name"] == "lookup"
    assert sent["tools"][0]["function"]["parameters"] == TOOLS[0]["input_schema"]
    assistant, result = sent["messages"][1], sent["messages"][2]
    # The chat upstream's own id (the fake's: a digest of the request), passed through both ways unchanged.
    assert assistant["tool_calls"][0]["id"] == call.id and call.id.startswith("call_") and len(call.id) > 10
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == call.input
    assert result == {"role": "tool", "tool_call_id": call.id, "content": "Error: no such word"}


def test_thinking_and_images(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], anthropic.Anthropic]
) -> None:
    translated, direct, chat, _ = pair(fakes, start_gateway, FakeBehavior(output_tokens=3, reasoning_tokens=2))
    content: list[Any] = [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]
    finals = []
    for gateway in (translated, direct):
        with clients(gateway.url).messages.stream(
            model="m",
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": content}],
        ) as stream:
            finals.append(stream.get_final_message())
    final, native = finals
    assert [b.type for b in final.content] == [b.type for b in native.content] == ["thinking", "text"]
    thinking, native_thinking = final.content[0], native.content[0]
    assert thinking.type == "thinking" and native_thinking.type == "thinking"
    assert thinking.thinking == native_thinking.thinking == "".join(answer_words(0, 2))
    assert thinking.signature == ""  # no signature can be made up for a chat provider's reasoning
    assert final.content[1].model_dump() == native.content[1].model_dump()
    sent = chat.app.state.recorded[-1].body
    assert sent is not None and sent["reasoning_effort"] == "low"
    parts = sent["messages"][0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}
    assert parts[2] == {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def test_a_claude_code_request_is_served_by_a_chat_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    """The request shape Claude Code sends (recorded from ``claude -p``): blocks of system prompt with a cache mark,
    a JSON ``metadata.user_id``, thinking, ``context_management`` clearing old thinking, ``?beta=true``."""
    chat = fakes.start("chat", FakeBehavior(output_tokens=4), record=True)
    gateway = start_gateway(gateway_config([chat], provider_options={"chat": {"apis": ["chat"]}}))
    body = {
        "model": "m",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "say hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": TOOLS,
        "metadata": {"user_id": '{"device_id":"d","session_id":"s"}'},
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    with httpx.stream("POST", gateway.base_url + "/messages?beta=true", json=body, timeout=10) as response:
        assert response.status_code == 200
        text = response.read().decode()
    assert text.startswith("event: message_start") and text.endswith(
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    sent = chat.app.state.recorded[-1]
    assert sent.path == "/v1/chat/completions" and sent.query == "" and sent.body is not None
    assert sent.body["messages"][0] == {
        "role": "system",
        "content": "x-anthropic-billing-header: cc_version=2.1;\n\nYou are a Claude agent.",
    }
    assert sent.body["user"] == body["metadata"]["user_id"] and sent.body["reasoning_effort"] == "high"  # type: ignore[index]


def test_serving_asks_are_read_as_absent_and_a_pinned_geography_goes_native(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], anthropic.Anthropic]
) -> None:
    """Fast mode's ``speed``, the capacity ``service_tier`` and the default ``inference_geo`` ask nothing of what the
    answer is: a chat deployment serves them (``standard_only`` as OpenAI's ``default``, the same ask).
    ``inference_geo: "us"`` pins where the model runs, which a chat deployment is not known to meet: refused there, it
    goes to the deployment that speaks Messages natively."""
    chat = fakes.start("chat", FakeBehavior(output_tokens=4), record=True)
    native = fakes.start("native", FakeBehavior(output_tokens=4), record=True)
    only_chat = start_gateway(gateway_config([chat], provider_options={"chat": {"apis": ["chat"]}}))
    both = start_gateway(
        gateway_config([chat, native], provider_options={"chat": {"apis": ["chat"]}, "native": {"apis": ["messages"]}})
    )
    hi: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
    client = clients(only_chat.url)
    answer = client.messages.create(
        model="m", max_tokens=16, messages=hi, speed="fast", service_tier="standard_only", inference_geo="global"
    )
    assert answer.content[0].type == "text" and answer.stop_reason == "end_turn"
    sent = chat.app.state.recorded[-1].body
    assert sent is not None and not {"speed", "inference_geo"} & sent.keys() and sent["service_tier"] == "default"
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="m", max_tokens=16, messages=hi, inference_geo="us")
    assert "'inference_geo' cannot be translated to the Chat Completions API" in refused.value.message
    assert len(chat.app.state.recorded) == 1
    clients(both.url).messages.create(model="m", max_tokens=16, messages=hi, speed="fast", inference_geo="us")
    assert len(chat.app.state.recorded) == 1
    pinned = native.app.state.recorded[-1].body
    assert pinned is not None and pinned["inference_geo"] == "us" and pinned["speed"] == "fast"


def test_how_tool_input_and_thinking_are_shown_asks_nothing_of_a_chat_deployment(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], anthropic.Anthropic]
) -> None:
    """A tool's ``eager_input_streaming`` and thinking's ``display`` say how Anthropic delivers a call's input and its
    thinking, not what the model answers: a chat deployment serves them. A tool deferred to tool search
    (``defer_loading``) changes what the model is shown: still refused, naming it."""
    chat = fakes.start("chat", FakeBehavior(output_tokens=4), record=True)
    gateway = start_gateway(gateway_config([chat], provider_options={"chat": {"apis": ["chat"]}}))
    client = clients(gateway.url)
    hi: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
    eager: list[anthropic.types.ToolParam] = [{**TOOLS[0], "eager_input_streaming": True}]
    thinking: anthropic.types.ThinkingConfigParam = {"type": "enabled", "budget_tokens": 2048, "display": "omitted"}
    answer = client.messages.create(model="m", max_tokens=4096, messages=hi, tools=eager, thinking=thinking)
    assert answer.stop_reason == "tool_use" and [b.name for b in answer.content if b.type == "tool_use"] == ["lookup"]
    sent = chat.app.state.recorded[-1].body
    assert sent is not None and sent["tools"][0]["function"]["name"] == "lookup"
    assert sent["reasoning_effort"] == "low" and "eager_input_streaming" not in json.dumps(sent)
    deferred: list[anthropic.types.ToolParam] = [{**TOOLS[0], "defer_loading": True}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="m", max_tokens=64, messages=hi, tools=deferred)
    assert "'tools[0].defer_loading' cannot be translated to the Chat Completions API" in refused.value.message
