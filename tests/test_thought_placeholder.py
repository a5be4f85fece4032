"""Gemini's thought signature where the client kept none: Google's placeholder, for a deployment known to need it.

Gemini refuses a tool loop whose current turn has a function call without its thought signature. A client that can
hold it gets it back on the call (``test_translate_reasoning``); one that cannot (a Responses client that did not ask
for ``reasoning.encrypted_content``, a Messages conversation whose call another provider made) has the placeholder
Google documents put on the call instead, but only for a deployment whose answers have carried signatures: any other
chat provider is never sent ``extra_content``. Real SDK clients, the fake provider as each vendor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.reasoning import SKIP_VALIDATOR, THOUGHT_SIGNATURE
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
VENDOR = FakeBehavior(output_tokens=3, reasoning_tokens=3, opaque_reasoning=True, check_thinking=True)
PLAIN = FakeBehavior(output_tokens=3)
TOOLS: list[Any] = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
]
CLAUDE_TOOLS: list[anthropic.types.ToolParam] = [
    {"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
]
PLACED = {"google": {"thought_signature": SKIP_VALIDATOR}}


def gateway_of(
    fakes: Fakes, start_gateway: StartGateway, **servers: tuple[str, FakeBehavior]
) -> tuple[Gateway, dict[str, FakeServer]]:
    started = {name: fakes.start(name, behavior) for name, (_, behavior) in servers.items()}
    options = {name: {"apis": [api]} for name, (api, _) in servers.items()}
    return start_gateway(gateway_config(list(started.values()), provider_options=options)), started


def sent_calls(server: FakeServer) -> list[dict[str, Any]]:
    body = server.app.state.recorded[-1].body
    assert body is not None
    return [call for m in body["messages"] if m.get("role") == "assistant" for call in m.get("tool_calls") or ()]


def responses_loop(client: openai.OpenAI, to: str, stream: bool) -> None:
    """Two turns of a tool loop, the client keeping no encrypted reasoning (it did not ask for it)."""
    ask: Any = {"model": "m", "store": False, "tools": TOOLS, "extra_body": {"provider": {"only": [to]}}}
    items: list[Any] = [{"role": "user", "content": "Look it up."}]
    for _ in range(2):
        if stream:
            with client.responses.stream(**ask, input=items) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(**ask, input=items)
        output = [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in output if item["type"] == "function_call"]
        assert len(calls) == 1 and all("encrypted_content" not in item for item in output)
        kept = [{k: v for k, v in item.items() if k not in ("id", "status", "content")} for item in output]
        items += [*kept, {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "found"}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_client_without_encrypted_reasoning_goes_on_at_gemini(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    gateway, servers = gateway_of(fakes, start_gateway, gemini=("chat", VENDOR), vllm=("chat", PLAIN))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        responses_loop(client, "gemini", stream)
        assert [call.get("extra_content") for call in sent_calls(servers["gemini"])] == [PLACED]
        responses_loop(client, "vllm", stream)  # a chat provider that never signed: nothing added
        assert [call.get("extra_content") for call in sent_calls(servers["vllm"])] == [None]


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_clients_call_made_by_claude_goes_on_at_a_gemini_known_to_sign(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """Claude makes the call, Gemini (whose answers were signed before) is asked the next step of the loop."""
    gateway, servers = gateway_of(fakes, start_gateway, gemini=("chat", VENDOR), claude=("messages", PLAIN))
    messages: list[Any] = [{"role": "user", "content": "Look it up."}]

    def turn(to: str) -> anthropic.types.Message:
        ask: Any = {"model": "m", "max_tokens": 256, "tools": CLAUDE_TOOLS, "extra_body": {"provider": {"only": [to]}}}
        if stream:
            with client.messages.stream(**ask, messages=messages) as events:
                return events.get_final_message()
        answer: anthropic.types.Message = client.messages.create(**ask, messages=messages)
        return answer

    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as client:
        assert turn("gemini").stop_reason == "tool_use"  # Gemini's signed answer teaches the gateway
        answer = turn("claude")
        call = next(b for b in answer.content if b.type == "tool_use")
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "found"}]},
        ]
        assert turn("gemini").stop_reason == "tool_use"
    assert [c.get("extra_content") for c in sent_calls(servers["gemini"])] == [PLACED]


CHAT_TOOLS: list[openai.types.chat.ChatCompletionToolParam] = [
    {"type": "function", "function": {"name": "lookup", "parameters": TOOLS[0]["parameters"]}}
]


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_clients_call_made_elsewhere_goes_on_at_a_gemini_known_to_sign(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    """The gateway routes a chat client's conversation between providers: a call vLLM made (unsigned) reaches Gemini
    in the next step, which would refuse it. Gemini's native answer (whole or streamed) taught that it signs, so the
    call goes with the placeholder; Gemini's own signed call, later in the turn, goes as it gave it."""
    gateway, servers = gateway_of(fakes, start_gateway, gemini=("chat", VENDOR), vllm=("chat", PLAIN))
    signed = {"google": {"thought_signature": THOUGHT_SIGNATURE}}

    def step(client: openai.OpenAI, messages: list[Any], to: str) -> list[Any]:
        answer = client.chat.completions.create(
            model="m", messages=messages, tools=CHAT_TOOLS, extra_body={"provider": {"only": [to]}}
        )
        message = answer.choices[0].message.model_dump(exclude_none=True)
        call = message["tool_calls"][0]
        return [*messages, message, {"role": "tool", "tool_call_id": call["id"], "content": "found"}]

    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        asked: Any = {"model": "m", "tools": CHAT_TOOLS, "extra_body": {"provider": {"only": ["gemini"]}}}
        look: list[Any] = [{"role": "user", "content": "Look it up."}]
        if stream:  # Gemini's own answer, relayed natively, teaches the gateway that it signs
            assert [chunk for chunk in client.chat.completions.create(**asked, messages=look, stream=True)]
        else:
            client.chat.completions.create(**asked, messages=look)
        messages = step(client, look, "vllm")
        assert "extra_content" not in messages[1]["tool_calls"][0]
        messages = step(client, messages, "gemini")  # refused (400) were the call sent unsigned
        assert [call.get("extra_content") for call in sent_calls(servers["gemini"])] == [PLACED]
        assert messages[3]["tool_calls"][0]["extra_content"] == signed
        step(client, messages, "gemini")
    assert [call.get("extra_content") for call in sent_calls(servers["gemini"])] == [PLACED, signed]
