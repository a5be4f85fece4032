"""Property: a request translated to another API and back loses nothing that is mapped.

For each source API, requests are drawn from the fields the docs' table marks *mapped* for the other API
(``docs/translation.md``), sent there and back (``translate_request`` twice), and read again: the neutral
shape is the same, but for the spellings the table marks as such (one string vs a list of one, a
``max_completion_tokens`` read back as ``max_tokens``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.translate import read_request, translate_request
from gateway.translate.ir import Api, Conversation, Image, Text, ToolCall, ToolChoice, ToolResult, Turn, Untranslatable

WORDS = st.text(alphabet="abc xyz!é\n", min_size=1, max_size=12)
IDS = st.sampled_from(["call_1", "call_2", "toolu_abc", "fc-9"])
NAMES = st.sampled_from(["lookup", "read_file", "run"])
ARGS = st.dictionaries(st.sampled_from(["q", "path", "n"]), st.one_of(WORDS, st.integers(0, 9)), max_size=2)
SCHEMA = st.just({"type": "object", "properties": {"q": {"type": "string"}}})
URLS = st.sampled_from(["https://example.com/a.png", "data:image/png;base64,iVBORw0KGgo="])
PROFILE = settings(max_examples=60, deadline=None)


def canonical(conversation: Conversation) -> dict[str, Any]:
    """The neutral shape without its spellings: which of the equal forms a field was written in."""
    turns = []
    for turn in conversation.turns:
        parts: list[tuple[Any, ...]] = []
        for part in turn.parts:
            if isinstance(part, Text):
                parts.append(("text", part.text))
            elif isinstance(part, Image):
                parts.append(("image", part.url, part.data, part.media_type))
            elif isinstance(part, ToolResult):
                parts.append(("result", part.call_id, tuple(p.text for p in part.content if isinstance(p, Text))))
            elif isinstance(part, ToolCall):
                parts.append(("call", part.id, part.name, json.loads(part.arguments)))  # the value, not its spelling
            else:
                parts.append(dataclasses.astuple(part))
        turns.append((turn.role, tuple(parts)))
    choice = conversation.tool_choice or ToolChoice("auto")
    return {
        "system": "\n\n".join(i.text for i in conversation.system),
        "turns": turns,
        "tools": [(t.name, t.description, t.parameters) for t in conversation.tools],
        "tool_choice": (choice.mode, choice.name),
        # With no tool to be called, whether calls may be parallel says nothing (Anthropic's none has no such flag).
        "parallel": conversation.parallel_tool_calls if choice.mode != "none" else None,
        "options": (conversation.max_tokens, conversation.temperature, conversation.top_p, conversation.stop),
        "user": conversation.user,
        "stream": conversation.stream,
        "output": dataclasses.astuple(conversation.output) if conversation.output else None,
        "metadata": conversation.metadata,
        "cache_key": conversation.prompt_cache_key,
        "reasoning": (conversation.reasoning.effort, conversation.reasoning.enabled)
        if conversation.reasoning
        else None,
    }


def there_and_back(body: dict[str, Any], source: Api, target: Api) -> None:
    there = translate_request(body, source, target, "upstream-model")
    back = translate_request(there, target, source, "m")
    sent, got = canonical(read_request(source, body)), canonical(read_request(source, back))
    forced = sent["tool_choice"][0] in ("required", "tool")
    if (
        target == "messages"
        and sent["reasoning"] is not None
        and (forced or _answers_tool_results(read_request(source, body)))
    ):
        # Approx. (docs/translation.md): Anthropic refuses extended thinking beside a forced tool call, and on a request
        # answering tool results without the calling turn's signed thinking (which no other API carries).
        assert there["thinking"] == {"type": "disabled"}
        sent["reasoning"] = got["reasoning"] = None
    assert got == sent


def _answers_tool_results(conversation: Conversation) -> bool:
    """Tool results follow the last assistant turn (none of the drawn turns has signed thinking)."""
    turns = conversation.turns
    last = max((i for i, turn in enumerate(turns) if turn.role == "assistant"), default=len(turns))
    return any(isinstance(p, ToolResult) for turn in turns[last + 1 :] for p in turn.parts)


SCHEMA_FORMAT = st.fixed_dictionaries(
    {"name": st.sampled_from(["answer", "plan"]), "schema": SCHEMA},
    optional={"strict": st.booleans(), "description": WORDS},
)


@st.composite
def chat_requests(draw: st.DrawFn, *, stop: bool = True, hottest: float = 2.0) -> dict[str, Any]:
    """A chat request of mapped fields; ``stop=False``: for the Responses API (no stop sequences, but output
    formats, metadata and a cache key, which it carries and the Messages API does not, and an output limit of at least
    16, the least it takes); ``hottest``: the highest temperature the target takes (the Messages API's is 1)."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(WORDS)})
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            parts = [{"type": "text", "text": draw(WORDS)}, {"type": "image_url", "image_url": {"url": draw(URLS)}}]
            messages.append({"role": "user", "content": parts})
        else:
            messages.append({"role": "user", "content": draw(WORDS)})
        calls = draw(st.lists(st.tuples(IDS, NAMES, ARGS), max_size=2, unique_by=lambda c: c[0]))
        text = draw(WORDS)
        assistant: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            assistant["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": _json(a)}} for i, n, a in calls
            ]
        messages.append(assistant)
        messages.extend({"role": "tool", "tool_call_id": i, "content": draw(WORDS)} for i, _, _ in calls)
    messages.append({"role": "user", "content": draw(WORDS)})
    least = 1 if stop else 16
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": draw(st.integers(least, 4000))}
    tools = draw(st.lists(NAMES, max_size=2, unique=True))
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": n, "description": draw(WORDS), "parameters": draw(SCHEMA)}}
            for n in tools
        ]
        body["tool_choice"] = draw(
            st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": tools[0]}}])
        )
    for name, values in (("temperature", st.floats(0, hottest)), ("top_p", st.floats(0, 1)), ("user", WORDS)):
        if draw(st.booleans()):
            body[name] = draw(values)
    if stop and draw(st.booleans()):
        body["stop"] = draw(st.lists(WORDS, min_size=1, max_size=3))
    if not stop:
        if draw(st.booleans()):
            body["response_format"] = draw(
                st.one_of(
                    st.just({"type": "json_object"}),
                    SCHEMA_FORMAT.map(lambda spec: {"type": "json_schema", "json_schema": spec}),
                )
            )
        if draw(st.booleans()):
            body["metadata"] = {"team": draw(WORDS)}
        if draw(st.booleans()):
            body["prompt_cache_key"] = draw(WORDS)
    if draw(st.booleans()):
        body["reasoning_effort"] = draw(st.sampled_from(["low", "medium", "high"]))
        body["max_tokens"] = draw(st.integers(25_000, 64_000))  # room for every effort's thinking budget
    body["stream"] = draw(st.booleans())
    return body


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


@PROFILE
@given(chat_requests(hottest=1.0))
def test_chat_to_messages_and_back(body: dict[str, Any]) -> None:
    there_and_back(body, "chat", "messages")


@PROFILE
@given(chat_requests(stop=False))
def test_chat_to_responses_and_back(body: dict[str, Any]) -> None:
    there_and_back(body, "chat", "responses")


@st.composite
def messages_requests(draw: st.DrawFn) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        content: list[dict[str, Any]] = [{"type": "text", "text": draw(WORDS)}]
        if draw(st.booleans()):
            url = draw(URLS)
            source = (
                {"type": "url", "url": url}
                if url.startswith("https")
                else {"type": "base64", "media_type": "image/png", "data": url.split(",", 1)[1]}
            )
            content.append({"type": "image", "source": source})
        messages.append({"role": "user", "content": content})
        calls = draw(st.lists(st.tuples(IDS, NAMES, ARGS), max_size=2, unique_by=lambda c: c[0]))
        blocks: list[dict[str, Any]] = [{"type": "text", "text": draw(WORDS)}]
        blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
        messages.append({"role": "assistant", "content": blocks})
        if calls:
            results = [{"type": "tool_result", "tool_use_id": i, "content": draw(WORDS)} for i, _, _ in calls]
            messages.append({"role": "user", "content": results})
    messages.append({"role": "user", "content": draw(WORDS)})
    body: dict[str, Any] = {"model": "m", "max_tokens": draw(st.integers(1, 4000)), "messages": messages}
    if draw(st.booleans()):
        body["system"] = draw(WORDS)
    tools = draw(st.lists(NAMES, max_size=2, unique=True))
    if tools:
        body["tools"] = [{"name": n, "description": draw(WORDS), "input_schema": draw(SCHEMA)} for n in tools]
        body["tool_choice"] = draw(
            st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": tools[0]}])
        )
    if draw(st.booleans()):
        body["stop_sequences"] = draw(st.lists(WORDS, min_size=1, max_size=3))
    if draw(st.booleans()):
        body["metadata"] = {"user_id": draw(WORDS)}
    for name, values in (("temperature", st.floats(0, 1)), ("top_p", st.floats(0, 1))):
        if draw(st.booleans()):
            body[name] = draw(values)
    body["stream"] = draw(st.booleans())
    return body


@PROFILE
@given(messages_requests())
def test_messages_to_chat_and_back(body: dict[str, Any]) -> None:
    there_and_back(body, "messages", "chat")


@st.composite
def responses_requests(draw: st.DrawFn, *, hottest: float = 2.0) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        content: list[dict[str, Any]] = [{"type": "input_text", "text": draw(WORDS)}]
        if draw(st.booleans()):
            content.append({"type": "input_image", "image_url": draw(URLS), "detail": "auto"})
        items.append({"role": "user", "content": content})
        items.append({"role": "assistant", "content": [{"type": "output_text", "text": draw(WORDS)}]})
        calls = draw(st.lists(st.tuples(IDS, NAMES, ARGS), max_size=2, unique_by=lambda c: c[0]))
        items += [{"type": "function_call", "call_id": i, "name": n, "arguments": _json(a)} for i, n, a in calls]
        items += [{"type": "function_call_output", "call_id": i, "output": draw(WORDS)} for i, _, _ in calls]
    items.append({"role": "user", "content": draw(WORDS)})
    # 16: the least output limit the Responses API takes.
    body: dict[str, Any] = {"model": "m", "input": items, "max_output_tokens": draw(st.integers(16, 4000))}
    if draw(st.booleans()):
        body["instructions"] = draw(WORDS)
    tools = draw(st.lists(NAMES, max_size=2, unique=True))
    if tools:
        body["tools"] = [
            {"type": "function", "name": n, "description": draw(WORDS), "parameters": draw(SCHEMA)} for n in tools
        ]
        body["tool_choice"] = draw(
            st.sampled_from(["auto", "none", "required", {"type": "function", "name": tools[0]}])
        )
        body["parallel_tool_calls"] = draw(st.booleans())
    for name, values in (("temperature", st.floats(0, hottest)), ("top_p", st.floats(0, 1)), ("user", WORDS)):
        if draw(st.booleans()):
            body[name] = draw(values)
    body["store"] = False
    if draw(st.booleans()):
        body["reasoning"] = {"effort": draw(st.sampled_from(["low", "medium", "high"]))}
        body["max_output_tokens"] = draw(st.integers(25_000, 64_000))
    body["stream"] = draw(st.booleans())
    return body


@PROFILE
@given(responses_requests())
def test_responses_to_chat_and_back(body: dict[str, Any]) -> None:
    there_and_back(body, "responses", "chat")


@PROFILE
@given(responses_requests(hottest=1.0))
def test_responses_to_messages_and_back(body: dict[str, Any]) -> None:
    there_and_back(body, "responses", "messages")


def test_the_conversation_is_the_same_turn_after_turn() -> None:
    """The first turn's translated messages are a prefix of the second's (prompt caches key on the prefix)."""
    first = [{"role": "user", "content": "hi"}]
    second: list[Any] = [*first, {"role": "assistant", "content": [{"type": "text", "text": "yes"}]}]
    second.append({"role": "user", "content": "more"})
    a = translate_request({"model": "m", "max_tokens": 9, "messages": first}, "messages", "chat", "u")
    b = translate_request({"model": "m", "max_tokens": 9, "messages": second}, "messages", "chat", "u")
    assert b["messages"][: len(a["messages"])] == a["messages"]
    assert list(a) == list(b)  # the same keys in the same order
    assert Turn("user", [Text("x")]) == Turn("user", [Text("x")])


def test_an_instruction_between_turns_is_a_user_turn_where_the_target_takes_none() -> None:
    """Codex adds developer messages between turns: the Responses API takes them anywhere, chat templates of
    open-weights models and the Messages API only at the start, so there they become the user's words."""
    body = {
        "model": "m",
        "input": [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": [{"type": "input_text", "text": "now in read-only mode"}]},
            {"role": "user", "content": "go"},
        ],
    }
    chat = translate_request(body, "responses", "chat", "u")
    assert chat["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "now in read-only mode"},
        {"role": "user", "content": "go"},
    ]
    messages = translate_request(body, "responses", "messages", "u")
    assert messages["system"] == "rules" and messages["messages"][1] == {
        "role": "user",
        "content": "now in read-only mode",
    }
    back = translate_request(
        {**chat, "messages": [chat["messages"][0], *chat["messages"][1:]]}, "chat", "responses", "u"
    )
    assert back["instructions"] == "rules"
    chat_mid = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "be terse"}],
    }
    assert translate_request(chat_mid, "chat", "responses", "u")["input"][1] == {
        "role": "system",
        "content": "be terse",
    }


def test_what_claude_code_and_codex_send_beside_the_conversation() -> None:
    """Claude Code: a system message inside ``messages`` (its mid-conversation-system beta), adaptive thinking at an
    effort; Codex: ``client_metadata`` (its session and turn ids), which no model reads and is not sent on."""
    claude: dict[str, Any] = {
        "model": "m",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "agents: "}, {"type": "text", "text": "none"}]},
            {"role": "assistant", "content": "ok"},
        ],
        "thinking": {"type": "adaptive"},
    }
    chat = translate_request(claude, "messages", "chat", "u")
    assert chat["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "agents: none"},
        {"role": "assistant", "content": "ok"},
    ]
    assert chat["reasoning_effort"] == "high"  # adaptive thinking at Anthropic's default effort
    low = translate_request({**claude, "output_config": {"effort": "low"}}, "messages", "responses", "u")
    assert low["reasoning"] == {"effort": "low"} and low["input"][1] == {"role": "system", "content": "agents: none"}
    first = translate_request({**claude, "messages": claude["messages"][1:]}, "messages", "chat", "u")
    assert first["messages"][0] == {"role": "system", "content": "rules\n\nagents: none"}
    with pytest.raises(Untranslatable) as refused:
        bad = {**claude, "messages": [{"role": "system", "content": [{"type": "image", "source": {}}]}]}
        translate_request(bad, "messages", "chat", "u")
    assert refused.value.field_path == "messages[0].content[0].type"
    codex = {"model": "m", "input": "hi", "client_metadata": {"session_id": "s", "turn_id": "t"}}
    assert translate_request(codex, "responses", "chat", "u") == translate_request(
        {"model": "m", "input": "hi"}, "responses", "chat", "u"
    )
