"""Responses API clients on chat-only deployments, and chat clients on Messages-only ones: the real ``openai``
SDK, streamed and whole, function tools with a round trip, each answer the same as the native fake gives."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "strict": False,
    }
]


@pytest.fixture
def clients() -> Iterator[Callable[[str], openai.OpenAI]]:
    made: list[openai.OpenAI] = []

    def make(base_url: str) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=base_url, api_key="client-key", max_retries=0, timeout=10))
        return made[-1]

    yield make
    for client in made:
        client.close()


def pair(
    fakes: Fakes, start_gateway: StartGateway, behavior: FakeBehavior, upstream: str = "chat", native: str = "responses"
) -> tuple[Gateway, Gateway, FakeServer]:
    """A gateway whose only deployment speaks ``upstream``, and one whose only deployment speaks ``native``."""
    only = fakes.start("only", behavior, record=True)
    direct = fakes.start("direct", behavior)
    translated = start_gateway(gateway_config([only], provider_options={"only": {"apis": [upstream]}}))
    natively = start_gateway(gateway_config([direct], provider_options={"direct": {"apis": [native]}}))
    return translated, natively, only


def test_responses_text_streamed_and_whole_as_natively(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    translated, natively, chat = pair(fakes, start_gateway, FakeBehavior(output_tokens=5))
    results = []
    for gateway in (translated, natively):
        client = clients(gateway.base_url)
        whole = client.responses.create(model="m", instructions="Be brief.", input="hi", max_output_tokens=50)
        with client.responses.stream(model="m", instructions="Be brief.", input="hi") as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
        results.append((whole, "".join(deltas), final))
    (whole, streamed, final), (native_whole, native_streamed, native_final) = results
    text = "".join(answer_words(0, 5))
    assert whole.output_text == native_whole.output_text == text
    assert streamed == native_streamed == final.output_text == native_final.output_text == text
    assert whole.status == final.status == "completed"
    assert final.usage is not None and final.usage.output_tokens == 5 and final.usage.input_tokens > 0
    sent = chat.app.state.recorded[-1]
    assert sent.path == "/v1/chat/completions" and sent.body is not None
    assert sent.body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert chat.app.state.recorded[0].body is not None
    assert chat.app.state.recorded[0].body["max_tokens"] == 50


def test_responses_function_call_round_trip(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    behavior = FakeBehavior(output_tokens=3, tool_call=True)
    translated, natively, chat = pair(fakes, start_gateway, behavior)
    finals = []
    for gateway in (translated, natively):
        with clients(gateway.base_url).responses.stream(model="m", input="look up the fox", tools=TOOLS) as stream:
            finals.append(stream.get_final_response())
    final, native = finals
    call, native_call = final.output[-1], native.output[-1]
    assert call.type == native_call.type == "function_call"
    assert call.type == "function_call" and native_call.type == "function_call"
    assert (call.name, json.loads(call.arguments)) == (native_call.name, json.loads(native_call.arguments))
    assert json.loads(call.arguments) == {"q": "".join(answer_words(0, 3))}
    # The output goes back as Codex sends it (the full input, store false): the chat upstream gets the history.
    client = clients(translated.base_url)
    history: list[Any] = [
        {"role": "user", "content": "look up the fox"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "a small animal"},
    ]
    answer = client.responses.create(model="m", input=history, tools=TOOLS, store=False)
    assert answer.output[-1].type == "function_call"
    sent = chat.app.state.recorded[-1].body
    assert sent is not None
    assert sent["messages"][1]["tool_calls"] == [
        {"id": call.call_id, "type": "function", "function": {"name": "lookup", "arguments": call.arguments}}
    ]
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.call_id, "content": "a small animal"}
    assert sent["tools"][0] == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up",
            "parameters": TOOLS[0]["parameters"],
            "strict": False,
        },
    }


def test_chat_client_on_a_messages_only_deployment(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    translated, natively, messages = pair(fakes, start_gateway, FakeBehavior(output_tokens=4), "messages", "chat")
    answers = []
    for gateway in (translated, natively):
        client = clients(gateway.base_url)
        ask: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
        whole = client.chat.completions.create(model="m", messages=ask, max_completion_tokens=20, stop=["zzz"])
        chunks = list(
            client.chat.completions.create(model="m", messages=ask, stream=True, stream_options={"include_usage": True})
        )
        answers.append((whole, chunks))
    (whole, chunks), (native_whole, native_chunks) = answers
    text = "".join(answer_words(0, 4))
    assert whole.choices[0].message.content == native_whole.choices[0].message.content == text
    assert whole.choices[0].finish_reason == "stop" and whole.usage is not None and whole.usage.completion_tokens == 4
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == "".join(c.choices[0].delta.content or "" for c in native_chunks if c.choices) == text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    sent = messages.app.state.recorded[0]
    assert sent.path == "/v1/messages" and sent.body is not None
    assert sent.body["system"] == "Be brief." and sent.body["max_tokens"] == 20
    assert sent.body["stop_sequences"] == ["zzz"]


def test_an_upstream_error_reaches_the_client_in_its_own_shape(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("chat", FakeBehavior(status=400, error_code="invalid_value"))
    gateway = start_gateway(gateway_config([fake], provider_options={"chat": {"apis": ["chat"]}}))
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(gateway.base_url + "/messages", json=body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]


@pytest.mark.parametrize("include", [["reasoning.encrypted_content"], None])
def test_anthropic_thinking_is_sealed_for_a_client_that_asks_for_encrypted_reasoning(
    fakes: Fakes, start_gateway: StartGateway, include: list[str] | None
) -> None:
    """A whole answer of a Messages deployment's thinking: sealed in ``encrypted_content`` only when asked for, and
    sent back (text dropped, as Codex sends it) it reaches the deployment as the signed thinking block it was."""
    fake = fakes.start("a", FakeBehavior(output_tokens=2, reasoning_tokens=3, check_thinking=True))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["messages"]}}))
    extra: Any = {"include": include} if include else {}
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        first = client.responses.create(model="m", input="hi", store=False, reasoning={"effort": "low"}, **extra)
        reasoning = first.output[0].model_dump(exclude_none=True)
        assert reasoning["type"] == "reasoning"
        if include is None:
            assert "encrypted_content" not in reasoning
            return
        assert reasoning["encrypted_content"].startswith("gateway.thinking.v1:")
        reasoning.pop("content")
        history: Any = [{"role": "user", "content": "hi"}, reasoning, {"role": "user", "content": "more"}]
        client.responses.create(model="m", input=history, store=False, reasoning={"effort": "low"}, **extra)
    sent = fake.app.state.recorded[1].body
    assert sent is not None
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": " the quick brown",
        "signature": "fake-signature",
    }


def test_a_sealed_thinking_block_is_left_out_of_what_a_native_responses_provider_is_sent(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """A session's earlier turn on a Messages deployment left a sealed block in the client's history; when the next
    turn goes to a native Responses provider, that provider (which cannot read it, and OpenAI refuses opaque reasoning
    it did not make) gets the history without it, and its own opaque reasoning as it was."""
    fake = fakes.start("a", FakeBehavior(output_tokens=2), record=True)
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["responses"]}}))
    sealed = {"type": "reasoning", "summary": [], "encrypted_content": "gateway.thinking.v1:eyJ0aGlua2luZyI6Im4ifQ=="}
    own = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-opaque"}
    history: Any = [
        {"role": "user", "content": "hi"},
        sealed,
        {"role": "assistant", "content": "hello"},
        own,
        {"role": "user", "content": "the prefix gateway.thinking.v1: in a message stays"},
    ]
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        client.responses.create(model="m", input=history, store=False)
        client.responses.create(model="m", input="gateway.thinking.v1: as plain input", store=False)
    sent = fake.app.state.recorded[0].body
    assert sent is not None
    assert sent["input"] == [history[0], history[2], own, history[4]]
    plain = fake.app.state.recorded[1].body
    assert plain is not None and plain["input"] == "gateway.thinking.v1: as plain input"
