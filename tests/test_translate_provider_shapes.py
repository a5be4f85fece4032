"""SDK clients served by translation from answers shaped as real providers shape them, scripted byte for byte.

The fake provider answers in the shapes the gateway's own writers produce; these answers are the ones real
providers give that a translation must also read: Gemini's OpenAI-compatible stream (tool-call deltas without
``index``, a tool call ended with ``finish_reason: "stop"``). Each test has the real ``anthropic`` or ``openai``
SDK as the client and a ``ScriptedUpstream`` as the only deployment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pydantic
import pytest

from tests.support.config import gateway_config
from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream
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
    upstream = ScriptedUpstream("gemini")
    test_servers.append(upstream.server.start())
    gateway = start_gateway(gateway_config([upstream], provider_options={"gemini": {"apis": ["chat"]}}))
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


@pytest.fixture
def messages_only(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> Iterator[tuple[ScriptedUpstream, str]]:
    """A scripted Messages-only upstream behind a gateway: (the upstream, the gateway's URL)."""
    upstream = ScriptedUpstream("claude")
    test_servers.append(upstream.server.start())
    gateway = start_gateway(gateway_config([upstream], provider_options={"claude": {"apis": ["messages"]}}))
    yield upstream, gateway.url


def claude_message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    usage = {"input_tokens": 12, "output_tokens": 30}
    head = {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up"}
    return {**head, "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}


def test_reasoning_without_a_limit_leaves_the_answer_its_room(messages_only: tuple[ScriptedUpstream, str]) -> None:
    """Thinking counts against Anthropic's ``max_tokens``: a client that set no limit (OpenAI's APIs need none)
    must not have its answer squeezed into what the thinking budget leaves of the default."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "4"}]))
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+2?"}], reasoning_effort="high"
        )
        chat = upstream.last
        client.responses.create(model="m", input="2+2?", reasoning={"effort": "medium"})
        responses = upstream.last
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}], max_tokens=3000)
        limited = upstream.last
    for sent, budget in ((chat, 24576), (responses, 8192)):
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert sent["max_tokens"] - budget == 4096  # the default answer's room, beside the thinking
    assert limited["max_tokens"] == 3000 and "thinking" not in limited  # the client's own limit, untouched


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_a_parsed_chat_completion_asks_claude_with_the_ga_structured_output_field(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """Anthropic's structured outputs are ``output_config.format`` since they left beta; the beta's top-level
    ``output_format`` is refused without its beta header (which the gateway does not send)."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": '{"name": "Ana", "age": 31}'}]))
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.parse(
            model="m", messages=[{"role": "user", "content": "Ana, 31"}], response_format=Person
        )
    assert answer.choices[0].message.parsed == Person(name="Ana", age=31)
    sent = upstream.last
    assert "output_format" not in sent
    assert sent["output_config"]["format"]["type"] == "json_schema"
    assert sent["output_config"]["format"]["schema"]["required"] == ["name", "age"]


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
    upstream = ScriptedUpstream("openai")
    test_servers.append(upstream.server.start())
    url = start_gateway(gateway_config([upstream], provider_options={"openai": {"apis": ["responses"]}})).url
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


def test_fields_that_ask_nothing_are_not_refused(messages_only: tuple[ScriptedUpstream, str]) -> None:
    """Some OpenAI clients (LangChain.js's among them) send the API's defaults on every call, and typed ones send unset
    fields as null: none of them asks anything another API cannot give, so none makes the request untranslatable."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "hi"}]))
    defaults: dict[str, Any] = {
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "logprobs": False,
        "logit_bias": {},
        "n": 1,
        "seed": None,
        "top_logprobs": None,
        "service_tier": "auto",
        "modalities": ["text"],
    }
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_body=defaults
        )
        assert answer.choices[0].message.content == "hi"
        assert upstream.last.keys() == {"model", "max_tokens", "messages"}
        # A value that does ask something is still refused, naming it.
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_body={"presence_penalty": 0.5}
            )
    assert refused.value.body["param"] == "presence_penalty"  # type: ignore[index]
    assert refused.value.body["code"] == "untranslatable_field"  # type: ignore[index]


def claude_stream(*blocks: tuple[dict[str, Any], list[dict[str, Any]]], stop: str) -> list[tuple[str | None, Any]]:
    """A Messages stream as Anthropic sends it: each ``(content block, its deltas)`` in turn."""

    def event(name: str, **data: Any) -> tuple[str, dict[str, Any]]:
        return name, {"type": name, **data}

    out = [event("message_start", message={**claude_message([]), "stop_reason": None})]
    for index, (block, deltas) in enumerate(blocks):
        out.append(event("content_block_start", index=index, content_block=block))
        out += [event("content_block_delta", index=index, delta=d) for d in deltas]
        out.append(event("content_block_stop", index=index))
    out.append(event("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 9}))
    return [*out, event("message_stop")]


def test_a_streamed_call_without_arguments_reaches_openai_clients_as_an_empty_object(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """Anthropic streams a call without arguments as a ``tool_use`` block whose only delta (if any) is empty; an
    OpenAI client parses the arguments it gets (Codex, and the SDK's own ``parse`` helpers), and "" is no JSON."""
    upstream, url = messages_only
    no_args = {"type": "tool_use", "id": "toolu_now", "name": "clock", "input": {}}
    with_args = {"type": "tool_use", "id": "toolu_tz", "name": "clock", "input": {}}
    upstream.answer_sse(
        claude_stream(
            (no_args, [{"type": "input_json_delta", "partial_json": ""}]),
            (with_args, [{"type": "input_json_delta", "partial_json": '{"tz": "UTC"}'}]),
            stop="tool_use",
        )
    )
    chat_tool: Any = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}
    responses_tool: Any = {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        with client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "time?"}], tools=[chat_tool]
        ) as chat:
            completion = chat.get_final_completion()
        with client.responses.stream(model="m", input="time?", tools=[responses_tool]) as responses:
            response = responses.get_final_response()
    calls = completion.choices[0].message.tool_calls or []
    assert [(c.id, c.function.arguments) for c in calls] == [("toolu_now", "{}"), ("toolu_tz", '{"tz": "UTC"}')]
    items = [(o.call_id, o.arguments) for o in response.output if o.type == "function_call"]
    assert items == [("toolu_now", "{}"), ("toolu_tz", '{"tz": "UTC"}')]


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


def test_a_tool_loop_continued_by_an_openai_client_asks_claude_no_extended_thinking(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """Anthropic refuses extended thinking on a request that answers tool results unless the calling turn starts
    with its signed thinking block, which an OpenAI client cannot send back (it got the reasoning as text): Codex,
    which asks reasoning on every call, would get a 400 on the second request of every tool loop."""
    upstream, url = messages_only
    thinking = {"type": "thinking", "thinking": "The clock tool.", "signature": "c2lnbmVk"}
    call = {"type": "tool_use", "id": "toolu_now", "name": "clock", "input": {}}
    upstream.answer_json(claude_message([thinking, call], stop="tool_use"))
    tool: Any = {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        first = client.responses.create(model="m", input="time?", tools=[tool], reasoning={"effort": "low"})
        assert upstream.last["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        history: list[Any] = [{"role": "user", "content": "time?"}]
        history += [item.model_dump(exclude_none=True) for item in first.output]
        history.append({"type": "function_call_output", "call_id": "toolu_now", "output": "12:00"})
        upstream.answer_json(claude_message([{"type": "text", "text": "Noon."}]))
        client.responses.create(model="m", input=history, tools=[tool], reasoning={"effort": "low"})
        answering = upstream.last
        # Text beside the tool results still answers them; once the model has answered, a new turn thinks again.
        beside = [*history, {"role": "user", "content": "be brief"}]
        client.responses.create(model="m", input=beside, tools=[tool], reasoning={"effort": "low"})
        answering_beside = upstream.last
        history += [{"role": "assistant", "content": "Noon."}, {"role": "user", "content": "and now?"}]
        client.responses.create(model="m", input=history, tools=[tool], reasoning={"effort": "low"})
        next_turn = upstream.last
    assert [b["type"] for b in answering["messages"][1]["content"]] == ["tool_use"]  # no signature to send back
    assert answering["thinking"] == answering_beside["thinking"] == {"type": "disabled"}
    assert next_turn["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_reasoning_another_api_gave_a_messages_client_never_reaches_claude(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """A Messages client got a chat provider's reasoning as ``thinking`` blocks with an empty signature; when its
    conversation goes on at a Messages provider (a fallback, a session moved), Anthropic would refuse the request
    for them ("Invalid `signature` in `thinking` block"), and for extended thinking on a tool loop whose calling
    turn then has none."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "Noon, sunny."}]))
    unsigned = {"type": "thinking", "thinking": "Ask the clock.", "signature": ""}
    signed = {"type": "thinking", "thinking": "Then the weather.", "signature": "c2lnbmVk"}
    messages: list[Any] = [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": [unsigned, {"type": "text", "text": "Noon."}]},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [signed, {"type": "tool_use", "id": "toolu_w", "name": "weather", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w", "content": "sunny"}]},
    ]
    thinking: Any = {"type": "enabled", "budget_tokens": 2048}
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        client.messages.create(model="m", max_tokens=4096, messages=messages, thinking=thinking, tools=TOOLS)
        past = upstream.last
        messages[3]["content"][0] = unsigned  # the tool loop itself began at a chat provider
        client.messages.create(model="m", max_tokens=4096, messages=messages, thinking=thinking, tools=TOOLS)
        loop = upstream.last
    assert past["messages"][1]["content"] == [{"type": "text", "text": "Noon."}]
    assert past["messages"][3]["content"][0] == signed and past["thinking"] == thinking  # signed blocks stay
    assert [b["type"] for b in loop["messages"][3]["content"]] == ["tool_use"]
    assert loop["thinking"] == {"type": "disabled"}
