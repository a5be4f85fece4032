"""The fake's tool calls each get their own id, in every API it speaks, streamed and whole (``gateway.fakes.ids``).

Why: agents pair a tool's result with its call by id; one constant id made a resumed conversation's calls
indistinguishable (Claude Code's ``--continue`` looped against the fake).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from tests.support.fakes import Fakes, FakeServer

TOOL = {"name": "lookup", "description": "look a word up", "parameters": {"type": "object", "properties": {}}}
FIRST = "look up the fox"
SECOND = "and now the dog"


def _openai(fake: FakeServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key="unused", max_retries=0, timeout=10)


def chat_id(fake: FakeServer, prompts: list[str], stream: bool) -> str:
    messages: list[Any] = [{"role": "user", "content": p} for p in prompts]
    tools: list[Any] = [{"type": "function", "function": TOOL}]
    client = _openai(fake)
    if not stream:
        answer = client.chat.completions.create(model="m", messages=messages, tools=tools)
        calls = answer.choices[0].message.tool_calls
        assert calls is not None
        return calls[0].id
    ids = [
        call.id
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=tools, stream=True)
        for choice in chunk.choices
        for call in choice.delta.tool_calls or ()
        if call.id
    ]
    assert len(ids) == 1, ids  # on the call's first delta only
    return ids[0]


def responses_id(fake: FakeServer, prompts: list[str], stream: bool) -> str:
    items: list[Any] = [{"role": "user", "content": p} for p in prompts]
    tools: list[Any] = [{"type": "function", **TOOL}]
    client = _openai(fake)
    output: list[Any]
    if not stream:
        output = client.responses.create(model="m", input=items, tools=tools).output
    else:
        added = []
        with client.responses.stream(model="m", input=items, tools=tools) as events:
            for event in events:
                if event.type == "response.output_item.added" and event.item.type == "function_call":
                    added.append(event.item.call_id)
            output = events.get_final_response().output
        assert len(added) == 1
    calls = [item.call_id for item in output if item.type == "function_call"]
    assert len(calls) == 1 and (not stream or calls == added)
    return calls[0]


def messages_id(fake: FakeServer, prompts: list[str], stream: bool) -> str:
    client = anthropic.Anthropic(base_url=fake.url, api_key="unused", max_retries=0, timeout=10)
    messages: list[Any] = [{"role": "user", "content": p} for p in prompts]
    tools: list[Any] = [{"name": TOOL["name"], "input_schema": TOOL["parameters"]}]
    content: list[Any]
    if not stream:
        content = client.messages.create(model="m", max_tokens=64, messages=messages, tools=tools).content
    else:
        with client.messages.stream(model="m", max_tokens=64, messages=messages, tools=tools) as events:
            content = events.get_final_message().content
    calls = [block.id for block in content if block.type == "tool_use"]
    assert len(calls) == 1
    return calls[0]


ASKS: dict[str, tuple[Callable[[FakeServer, list[str], bool], str], str]] = {
    "chat": (chat_id, "call_"),
    "responses": (responses_id, "call_"),
    "messages": (messages_id, "toolu_"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", list(ASKS))
def test_each_turns_tool_call_has_its_own_id(fakes: Fakes, api: str, stream: bool) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=3, tool_call=True, tool_args_head='{"q": "'))
    ask, prefix = ASKS[api]
    first = ask(fake, [FIRST], stream)
    second = ask(fake, [FIRST, SECOND], stream)
    assert first.startswith(prefix) and second.startswith(prefix) and len(first) > len(prefix) + 8
    assert first != second  # each turn its own
    assert ask(fake, [FIRST], stream) == first  # the same request, the same id: the fake stays deterministic
