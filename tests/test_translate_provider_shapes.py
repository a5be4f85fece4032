"""SDK clients served by translation from answers shaped as real providers shape them, scripted byte for byte.

The fake provider answers in the shapes the gateway's own writers produce; these are the answers of real chat and
Responses providers that a translation must also read: Gemini's OpenAI-compatible stream (tool-call deltas without
``index``, a tool call ended with ``finish_reason: "stop"``), OpenAI's refusals and its opaque reasoning (returned
only when asked), and what a chat provider's tool message can hold. Each test has the real ``anthropic`` or
``openai`` SDK as the client and a ``ScriptedUpstream`` as the only deployment (Claude's side:
``test_translate_claude``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream, scripted_behind_gateway
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
TOOLS: list[anthropic.types.ToolParam] = [{"name": "weather", "input_schema": {"type": "object"}}]
HEAD = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "gemini-up"}
USAGE = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}


def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
    return None, {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def gemini_calls(finish: str) -> list[tuple[str | None, Any]]:
    """Two parallel calls as Gemini's OpenAI-compatible endpoint streams them: no ``index``, each whole in one
    delta, or the second's arguments in a later delta that repeats nothing but them."""
    first = {"id": "call_paris", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    second = {"id": "call_rome", "type": "function", "function": {"name": "weather", "arguments": '{"city": '}}
    return [
        chunk({"role": "assistant", "tool_calls": [first]}),
        chunk({"tool_calls": [second]}),
        chunk({"tool_calls": [{"function": {"arguments": '"Rome"}'}}]}),
        chunk({}, finish),
        (None, {**HEAD, "choices": [], "usage": USAGE}),
        (None, "[DONE]"),
    ]


@pytest.fixture
def chat_only(test_servers: list[ServerThread], start_gateway: StartGateway) -> Iterator[tuple[ScriptedUpstream, str]]:
    """A scripted chat-only upstream behind a gateway: (the upstream, the gateway's URL)."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "gemini", "chat")
    yield upstream, gateway.url


@pytest.mark.parametrize("finish", ["tool_calls", "stop"])
def test_indexless_parallel_calls_reach_a_messages_client_as_two_tool_uses(
    chat_only: tuple[ScriptedUpstream, str], finish: str
) -> None:
    upstream, url = chat_only
    upstream.answer_sse(gemini_calls(finish))
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Paris and Rome?"}]
        with client.messages.stream(model="m", max_tokens=64, tools=TOOLS, messages=messages) as stream:
            final = stream.get_final_message()
    calls = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert calls == [("call_paris", "weather", {"city": "Paris"}), ("call_rome", "weather", {"city": "Rome"})]
    # Gemini ends a tool call with "stop": the client must still be told to run the tools.
    assert final.stop_reason == "tool_use"


def test_indexless_parallel_calls_reach_a_responses_client_as_two_function_calls(
    chat_only: tuple[ScriptedUpstream, str],
) -> None:
    upstream, url = chat_only
    upstream.answer_sse(gemini_calls("stop"))
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        tool: Any = {"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": False}
        with client.responses.stream(model="m", input="Paris and Rome?", tools=[tool]) as stream:
            final = stream.get_final_response()
    calls = [(o.call_id, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [("call_paris", '{"city": "Paris"}'), ("call_rome", '{"city": "Rome"}')]


def test_a_whole_tool_call_ended_with_stop_is_a_tool_use(chat_only: tuple[ScriptedUpstream, str]) -> None:
    upstream, url = chat_only
    call = {"id": "call_paris", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    upstream.answer_json(
        {**HEAD, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    )
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        answer = client.messages.create(
            model="m", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "Paris?"}]
        )
    assert [b.type for b in answer.content] == ["tool_use"]
    assert answer.stop_reason == "tool_use"


def test_a_tool_result_of_several_text_blocks_keeps_them_apart(chat_only: tuple[ScriptedUpstream, str]) -> None:
    """An MCP tool's result is often several text blocks; a chat tool message holds one text, in which they must
    not run into each other."""
    upstream, url = chat_only
    message = {"role": "assistant", "content": "Both found."}
    upstream.answer_json(
        {**HEAD, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    )
    files: list[anthropic.types.TextBlockParam] = [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b.py"}]
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "List the files, and the dirs."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_files", "name": "weather", "input": {}},
                {"type": "tool_use", "id": "call_dirs", "name": "weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_files", "content": files},
                {"type": "tool_result", "tool_use_id": "call_dirs", "content": files, "is_error": True},
            ],
        },
    ]
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        client.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=messages)
    results = [m for m in upstream.last["messages"] if m["role"] == "tool"]
    assert results == [
        {"role": "tool", "tool_call_id": "call_files", "content": "a.py\nb.py"},
        {"role": "tool", "tool_call_id": "call_dirs", "content": "Error: a.py\nb.py"},
    ]


OPAQUE: dict[str, Any] = {"type": "reasoning", "id": "rs_up", "summary": [], "encrypted_content": "gAAAA-opaque"}
CALL: dict[str, Any] = {
    "type": "function_call",
    "id": "fc_up",
    "call_id": "call_paris",
    "name": "weather",
    "arguments": "{}",
}
REASONED: dict[str, Any] = {
    "id": "resp_up",
    "object": "response",
    "created_at": 1,
    "model": "o-up",
    "status": "completed",
    "output": [OPAQUE, CALL],
    "usage": {"input_tokens": 20, "output_tokens": 40, "total_tokens": 60},
}


def reasoned_stream() -> list[tuple[str | None, Any]]:
    """``REASONED`` as OpenAI streams it."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**REASONED, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"output_index": 0, "item": {**OPAQUE, "encrypted_content": None}}),
        ("response.output_item.done", {"output_index": 0, "item": OPAQUE}),
        ("response.output_item.added", {"output_index": 1, "item": {**CALL, "arguments": ""}}),
        ("response.function_call_arguments.delta", {"output_index": 1, "item_id": "fc_up", "delta": "{}"}),
        ("response.output_item.done", {"output_index": 1, "item": CALL}),
        ("response.completed", {"response": REASONED}),
    ]
    return [(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(events)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_providers_reasoning_goes_back_to_it_next_turn(
    test_servers: list[ServerThread], start_gateway: StartGateway, stream: bool
) -> None:
    """With ``store: false`` an OpenAI reasoning model's reasoning survives a turn only as the opaque item the
    request asked for; a Messages client holds it as ``redacted_thinking`` (streamed or whole) and sends it back."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "openai", "responses")
    url = gateway.url
    messages: list[Any] = [{"role": "user", "content": "Paris?"}]
    ask: dict[str, Any] = {"model": "m", "max_tokens": 4096, "tools": TOOLS}
    ask["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        if stream:
            upstream.answer_sse(reasoned_stream())
            with client.messages.stream(**ask, messages=messages) as events:
                answer = events.get_final_message()
        else:
            upstream.answer_json(REASONED)
            answer = client.messages.create(**ask, messages=messages)
        assert upstream.last["include"] == ["reasoning.encrypted_content"] and upstream.last["store"] is False
        assert [b.type for b in answer.content] == ["redacted_thinking", "tool_use"]
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_paris", "content": "sunny"}]},
        ]
        upstream.answer_json(REASONED)
        client.messages.create(**ask, messages=messages)
    sent_back = upstream.last["input"][1]
    assert sent_back == {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-opaque"}


def test_an_openai_refusal_reaches_messages_and_responses_clients(chat_only: tuple[ScriptedUpstream, str]) -> None:
    """OpenAI says a refusal in ``refusal``, its ``content`` null (structured outputs, safety): it is the answer,
    not nothing, whole or streamed."""
    upstream, url = chat_only
    said = "I can't help with that."
    message = {"role": "assistant", "content": None, "refusal": said}
    whole = {
        **HEAD,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    streamed = [
        chunk({"role": "assistant", "content": None, "refusal": None}),
        chunk({"refusal": "I can't "}),
        chunk({"refusal": "help with that."}),
        chunk({}, "stop"),
        (None, {**HEAD, "choices": [], "usage": USAGE}),
        (None, "[DONE]"),
    ]
    ask: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Help me."}]
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as claude:
        upstream.answer_json(whole)
        answer = claude.messages.create(model="m", max_tokens=64, messages=ask)
        upstream.answer_sse(streamed)
        with claude.messages.stream(model="m", max_tokens=64, messages=ask) as stream:
            final = stream.get_final_message()
    assert [(b.type, getattr(b, "text", None)) for b in answer.content] == [("text", said)]
    assert [(b.type, getattr(b, "text", None)) for b in final.content] == [("text", said)]
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        upstream.answer_json(whole)
        assert client.responses.create(model="m", input="Help me.").output_text == said
        upstream.answer_sse(streamed)
        with client.responses.stream(model="m", input="Help me.") as events:
            assert events.get_final_response().output_text == said


def test_claude_codes_user_id_reaches_openai_within_its_limit(chat_only: tuple[ScriptedUpstream, str]) -> None:
    """OpenAI takes a ``user`` of at most 64 characters; Claude Code's ``metadata.user_id`` is a JSON object of some
    130, sent on every call: it goes as its hash (the same every turn), a short one as it is."""
    upstream, url = chat_only
    message = {"role": "assistant", "content": "hi"}
    upstream.answer_json(
        {**HEAD, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    )
    claude_code = json.dumps({"device_id": "ab" * 32, "account_uuid": "", "session_id": str(uuid.UUID(int=7))})
    sent = []
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        for user_id in (claude_code, claude_code, "user-7"):
            client.messages.create(
                model="m", max_tokens=64, metadata={"user_id": user_id}, messages=[{"role": "user", "content": "hi"}]
            )
            sent.append(upstream.last["user"])
    assert sent == [hashlib.sha256(claude_code.encode()).hexdigest()] * 2 + ["user-7"]
    assert len(sent[0]) == 64
