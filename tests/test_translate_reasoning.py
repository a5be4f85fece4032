"""Opaque reasoning goes back only to the API that made it: real SDK clients, the fake provider as each vendor.

Anthropic's signed and redacted thinking, an OpenAI Responses reasoning item's ``encrypted_content`` and Gemini's
thought signature on a chat tool call are each refused (400) by the other vendors, and Anthropic and Gemini refuse
a tool loop that lost theirs. The fakes make and check them so (``gateway.fakes.reasoning``); a conversation whose
turns go to providers of different APIs (``provider.only``) must keep each provider's own and send it nobody else's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.reasoning import ENCRYPTED, REDACTED, SIGNATURE, THOUGHT_SIGNATURE
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
VENDOR = FakeBehavior(output_tokens=3, reasoning_tokens=3, opaque_reasoning=True, check_thinking=True)
CLAUDE_TOOLS: list[anthropic.types.ToolParam] = [
    {"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
]
OPENAI_TOOLS: list[Any] = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
]
CHAT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
]
THINKING: Any = {"type": "enabled", "budget_tokens": 2048}
ENCRYPTED_ASKED: Any = ["reasoning.encrypted_content"]


def only(name: str) -> dict[str, Any]:
    return {"provider": {"only": [name]}}


def vendors(fakes: Fakes, start_gateway: StartGateway, **apis: str) -> tuple[Gateway, dict[str, FakeServer]]:
    """One model on a fake per ``name=api``, each making and checking opaque reasoning as that API's vendor does."""
    servers = {name: fakes.start(name, VENDOR) for name in apis}
    options = {name: {"apis": [api]} for name, api in apis.items()}
    return start_gateway(gateway_config(list(servers.values()), provider_options=options)), servers


def last_body(server: FakeServer) -> dict[str, Any]:
    body = server.app.state.recorded[-1].body
    assert body is not None
    return body


def claude_turn(client: anthropic.Anthropic, messages: list[Any], stream: bool, to: str) -> anthropic.types.Message:
    ask: Any = {"model": "m", "max_tokens": 4096, "thinking": THINKING, "tools": CLAUDE_TOOLS, "extra_body": only(to)}
    if stream:
        with client.messages.stream(**ask, messages=messages) as events:
            return events.get_final_message()
    answer: anthropic.types.Message = client.messages.create(**ask, messages=messages)
    return answer


def responses_turn(client: openai.OpenAI, items: list[Any], stream: bool, to: str) -> list[dict[str, Any]]:
    ask: Any = {"model": "m", "store": False, "reasoning": {"effort": "low"}, "include": ENCRYPTED_ASKED}
    ask.update(tools=OPENAI_TOOLS, extra_body=only(to))
    if stream:
        with client.responses.stream(**ask, input=items) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**ask, input=items)
    return [item.model_dump(exclude_none=True) for item in response.output]


def answered_tool(answer: anthropic.types.Message) -> list[Any]:
    """The next turn of a Messages conversation: the answer as the client keeps it, and its tool's result."""
    call = next(b for b in answer.content if b.type == "tool_use")
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "found"}
    return [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
        {"role": "user", "content": [result]},
    ]


def tool_outputs(output: list[dict[str, Any]]) -> list[Any]:
    """The next turn of a Responses conversation: the output items as Codex keeps them, and the calls' results."""
    kept = [{k: v for k, v in item.items() if k not in ("id", "status", "content")} for item in output]
    results = [
        {"type": "function_call_output", "call_id": item["call_id"], "output": "found"}
        for item in output
        if item["type"] == "function_call"
    ]
    return [*kept, *results]


@pytest.mark.parametrize("stream", [False, True])
def test_claudes_thinking_reaches_a_responses_provider_without_anthropics_opaque_reasoning(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """Claude thought (a signed block and a redacted one) and called a tool; the next turn goes to an OpenAI
    Responses provider, which is sent neither (it would refuse the redacted block's data as ``encrypted_content``)."""
    gateway, servers = vendors(fakes, start_gateway, claude="messages", gpt="responses")
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as client:
        messages: list[Any] = [{"role": "user", "content": "Look it up."}]
        answer = claude_turn(client, messages, stream, "claude")
        assert [b.type for b in answer.content] == ["thinking", "redacted_thinking", "tool_use"]
        assert answer.content[1].model_dump()["data"] == REDACTED  # Anthropic's own, as it made it
        messages += answered_tool(answer)
        claude_turn(client, messages, stream, "gpt")
    sent = last_body(servers["gpt"])["input"]
    assert [item.get("type", "message") for item in sent] == ["message", "function_call", "function_call_output"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_clients_claude_reasoning_is_kept_from_a_responses_provider_and_given_back_to_claude(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """Codex's way (``store: false``, encrypted reasoning asked): Claude's signed and redacted thinking come back
    sealed; a native Responses provider is sent the history without them, and Claude, a turn later, gets both back
    as it made them (its tool loop keeps thinking)."""
    gateway, servers = vendors(fakes, start_gateway, claude="messages", gpt="responses")
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        items: list[Any] = [{"role": "user", "content": "Look it up."}]
        output = responses_turn(client, items, stream, "claude")
        assert [item["type"] for item in output] == ["reasoning", "reasoning", "function_call"]
        assert all(item["encrypted_content"].startswith("gateway.") for item in output[:2])
        items += tool_outputs(output)
        items += tool_outputs(responses_turn(client, items, stream, "gpt"))
        items.append({"role": "user", "content": "And again."})
        responses_turn(client, items, stream, "claude")
    gpt_input = last_body(servers["gpt"])["input"]
    assert [item.get("encrypted_content") for item in gpt_input if item.get("type") == "reasoning"] == []
    claude_messages = last_body(servers["claude"])["messages"]
    assert [b["type"] for b in claude_messages[1]["content"]] == ["thinking", "redacted_thinking", "tool_use"]
    assert claude_messages[1]["content"][0]["signature"] == SIGNATURE
    assert claude_messages[1]["content"][1]["data"] == REDACTED


@pytest.mark.parametrize("stream", [False, True])
def test_responses_reasoning_reaches_a_messages_provider_without_openais_opaque_reasoning(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """A Messages client's turn answered by an OpenAI Responses provider (its reasoning encrypted, held by the client
    as ``redacted_thinking``); the next turn goes natively to Claude, which is not sent that block (it would refuse
    its data) and, its tool loop now without Claude's own thinking, is asked no extended thinking."""
    gateway, servers = vendors(fakes, start_gateway, claude="messages", gpt="responses")
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as client:
        messages: list[Any] = [{"role": "user", "content": "Look it up."}]
        answer = claude_turn(client, messages, stream, "gpt")
        assert [b.type for b in answer.content] == ["thinking", "redacted_thinking", "tool_use"]
        messages += answered_tool(answer)
        claude_turn(client, messages, stream, "claude")
        claude_turn(client, messages, stream, "gpt")
    sent = last_body(servers["claude"])
    assert [b["type"] for b in sent["messages"][1]["content"]] == ["tool_use"]
    assert sent["thinking"] == {"type": "disabled"}
    back = last_body(servers["gpt"])["input"]
    assert [item.get("encrypted_content") for item in back if item.get("type") == "reasoning"] == [ENCRYPTED]


@pytest.mark.parametrize("stream", [False, True])
def test_geminis_thought_signature_goes_round_a_chat_client(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """A chat client gets the signature on the tool call as Gemini gave it (whole, or on the call's delta) and
    sends it back as it got it (the native relay carries it untouched: this keeps it so, and the fake's shapes)."""
    gateway, servers = vendors(fakes, start_gateway, gemini="chat")
    signed = {"google": {"thought_signature": THOUGHT_SIGNATURE}}
    messages: list[Any] = [{"role": "user", "content": "Look it up."}]
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        if stream:
            chunks = client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, stream=True)
            deltas = [c.choices[0].delta.model_dump(exclude_none=True) for c in chunks if c.choices]
            calls = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
            assert calls[0]["extra_content"] == signed
            arguments = "".join(c["function"].get("arguments", "") for c in calls)
            call = {"id": calls[0]["id"], "type": "function", "function": {"name": "lookup", "arguments": arguments}}
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**call, "extra_content": signed}],
            }
        else:
            answer = client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
            message = answer.choices[0].message.model_dump(exclude_none=True)
            assert message["tool_calls"][0]["extra_content"] == signed
        messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "found"}]
        client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, stream=stream)
    assert last_body(servers["gemini"])["messages"][1]["tool_calls"][0]["extra_content"] == signed


@pytest.mark.parametrize("stream", [False, True])
def test_geminis_thought_signature_goes_round_a_messages_client(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """A Messages client holds Gemini's signature sealed in a ``redacted_thinking`` block before the call; the next
    turn gives it back on that call, and Claude, a turn later, is sent none of it."""
    gateway, servers = vendors(fakes, start_gateway, gemini="chat", claude="messages")
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as client:
        messages: list[Any] = [{"role": "user", "content": "Look it up."}]
        answer = claude_turn(client, messages, stream, "gemini")
        assert [b.type for b in answer.content][-2:] == ["redacted_thinking", "tool_use"]
        messages += answered_tool(answer)
        claude_turn(client, messages, stream, "gemini")
        claude_turn(client, messages, stream, "claude")
    call = last_body(servers["gemini"])["messages"][1]["tool_calls"][0]
    assert call["extra_content"] == {"google": {"thought_signature": THOUGHT_SIGNATURE}}
    assert [b["type"] for b in last_body(servers["claude"])["messages"][1]["content"]] == ["tool_use"]


@pytest.mark.parametrize("stream", [False, True])
def test_geminis_thought_signature_goes_round_a_responses_client(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """A Responses client that asks for encrypted reasoning holds Gemini's signature sealed in a reasoning item; the
    next turn gives it back on the call, and an OpenAI Responses provider is sent none of it."""
    gateway, servers = vendors(fakes, start_gateway, gemini="chat", gpt="responses")
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        items: list[Any] = [{"role": "user", "content": "Look it up."}]
        output = responses_turn(client, items, stream, "gemini")
        assert [item["type"] for item in output] == ["reasoning", "function_call"]
        items += tool_outputs(output)
        responses_turn(client, items, stream, "gemini")
        responses_turn(client, items, stream, "gpt")
    call = last_body(servers["gemini"])["messages"][1]["tool_calls"][0]
    assert call["extra_content"] == {"google": {"thought_signature": THOUGHT_SIGNATURE}}
    assert [i for i in last_body(servers["gpt"])["input"] if i.get("type") == "reasoning"] == []


@pytest.mark.parametrize("thinking", [THINKING, {"type": "adaptive"}])
def test_a_claude_tool_loop_whose_call_a_chat_provider_made_without_reasoning_goes_on_at_claude(
    fakes: Fakes, start_gateway: StartGateway, thinking: Any
) -> None:
    """Claude Code asks thinking on every call. When the turn that called its tools came from a provider that gave no
    reasoning at all (a chat model without it), that turn starts with ``tool_use``: Anthropic refuses a request that
    answers its tool results with thinking on ("a final `assistant` message must start with a thinking block").
    That request goes without thinking, whatever kind of thinking was asked."""
    gateway, servers = vendors(fakes, start_gateway, claude="messages")
    messages: list[Any] = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}]},
    ]
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as client:
        answer = client.messages.create(
            model="m", max_tokens=4096, messages=messages, thinking=thinking, tools=CLAUDE_TOOLS
        )
    assert answer.content
    assert last_body(servers["claude"])["thinking"] == {"type": "disabled"}
