"""The six directed pairs against aimock (a third-party mock server, ``tests.aimock_server``), with the real SDKs,
streamed and whole: parallel tool calls come back as the client's own calls, in order, each with its id and
arguments; reasoning comes back as the client's reasoning (chat ``reasoning_content``, a Messages ``thinking`` block,
a Responses ``reasoning`` item) before the text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.aimock_server import AimockServer
from tests.support.config import gateway_config
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
PAIRS = [(c, u) for c in ("chat", "messages", "responses") for u in ("chat", "messages", "responses") if c != u]
FIXTURES: list[dict[str, Any]] = [
    {
        "match": {"userMessage": "two tools"},
        "response": {"toolCalls": [{"name": "f", "arguments": {"x": "1"}}, {"name": "g", "arguments": {"y": "2"}}]},
    },
    {"match": {"userMessage": "think"}, "response": {"content": "the answer", "reasoning": "some thoughts"}},
]
PARAMETERS = {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string"}}}
Seen = tuple[list[tuple[str, dict[str, Any]]], str, str]
"""What the client's SDK read: the calls (name, arguments) in order, the reasoning, the text."""


@pytest.fixture(scope="module")
def aimock() -> Iterator[AimockServer]:
    with AimockServer(FIXTURES) as server:
        yield server


def chat(client: openai.OpenAI, prompt: str, stream: bool) -> Seen:
    tools: Any = [{"type": "function", "function": {"name": n, "parameters": PARAMETERS}} for n in ("f", "g")]
    messages: Any = [{"role": "user", "content": prompt}]
    if not stream:
        message = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message
        calls = [
            (c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or ()
            if c.type == "function"
        ]
        assert all(c.id for c in message.tool_calls or ())
        return calls, str((message.model_extra or {}).get("reasoning_content") or ""), message.content or ""
    parts: dict[int, list[str]] = {}
    reasoning = text = ""
    for chunk in client.chat.completions.create(model="m", messages=messages, tools=tools, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            reasoning += str((choice.delta.model_extra or {}).get("reasoning_content") or "")
            for call in choice.delta.tool_calls or ():
                if call.id:  # the call's first delta: its id and name
                    parts[call.index] = [call.function.name or "" if call.function else "", ""]
                if call.function and call.function.arguments:
                    parts[call.index][1] += call.function.arguments
    return [(name, json.loads(arguments)) for name, arguments in parts.values()], reasoning, text


def messages(client: anthropic.Anthropic, prompt: str, stream: bool) -> Seen:
    tools: Any = [{"name": n, "input_schema": PARAMETERS} for n in ("f", "g")]
    asked: Any = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": prompt}], "tools": tools}
    if stream:
        with client.messages.stream(**asked) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**asked)
    calls = [(b.name, dict(b.input)) for b in message.content if b.type == "tool_use" and b.id]
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    text = "".join(b.text for b in message.content if b.type == "text")
    kinds = [b.type for b in message.content if b.type != "redacted_thinking"]
    assert kinds in (["tool_use", "tool_use"], ["thinking", "text"]), kinds
    return calls, thinking, text


def responses(client: openai.OpenAI, prompt: str, stream: bool) -> Seen:
    tools: Any = [{"type": "function", "name": n, "parameters": PARAMETERS} for n in ("f", "g")]
    response: Any
    if stream:
        with client.responses.stream(model="m", input=prompt, tools=tools) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="m", input=prompt, tools=tools)
    calls = [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call" and i.call_id]
    reasoning = "".join(c.text for i in response.output if i.type == "reasoning" for c in i.content or ())
    return calls, reasoning, response.output_text


def ask(client_api: str, gateway: Gateway, prompt: str, stream: bool) -> Seen:
    if client_api == "messages":
        with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
            return messages(claude, prompt, stream)
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        return (chat if client_api == "chat" else responses)(client, prompt, stream)


@pytest.mark.parametrize(("client_api", "upstream"), PAIRS)
@pytest.mark.parametrize("stream", [False, True])
def test_parallel_calls_and_reasoning_in_every_pair(
    aimock: AimockServer, start_gateway: StartGateway, client_api: str, upstream: str, stream: bool
) -> None:
    gateway = start_gateway(gateway_config([aimock], provider_options={aimock.name: {"apis": [upstream]}}))
    assert ask(client_api, gateway, "two tools", stream) == ([("f", {"x": "1"}), ("g", {"y": "2"})], "", "")
    assert ask(client_api, gateway, "think", stream) == ([], "some thoughts", "the answer")
