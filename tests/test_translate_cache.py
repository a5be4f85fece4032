"""Prompt caches survive translation: turn after turn, the translated request starts with the very bytes of the
previous turn's translated request (``benchmarks/translate_cache.py`` measures what that keeps cached)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.relay.outbound import encode_body
from gateway.translate import Api, translate_request

SYSTEM = [{"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]


def messages_turns(count: int) -> list[dict[str, Any]]:
    history: list[Any] = []
    bodies = []
    for turn in range(count):
        content: list[Any] = [{"type": "text", "text": f"turn {turn}"}]
        if history:
            content.insert(0, {"type": "tool_result", "tool_use_id": f"toolu_{turn - 1}", "content": "done"})
        history.append({"role": "user", "content": content})
        bodies.append({"model": "m", "max_tokens": 99, "system": SYSTEM, "tools": TOOLS, "messages": list(history)})
        thinking = {"type": "thinking", "thinking": "hmm", "signature": ""}
        call = {"type": "tool_use", "id": f"toolu_{turn}", "name": "lookup", "input": {"q": "é", "n": turn}}
        history.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "ok"}, call]})
    return bodies


def responses_turns(count: int) -> list[dict[str, Any]]:
    items: list[Any] = []
    bodies = []
    tools = [{"type": "function", "name": "lookup", "parameters": TOOLS[0]["input_schema"], "strict": False}]
    for turn in range(count):
        if items:
            items.append({"type": "function_call_output", "call_id": f"call_{turn - 1}", "output": "done"})
        items.append({"role": "user", "content": [{"type": "input_text", "text": f"turn {turn}"}]})
        body = {"model": "m", "instructions": "Be careful.", "input": list(items), "tools": tools, "store": False}
        bodies.append(
            {**body, "reasoning": {"effort": "low", "summary": "auto"}, "include": ["reasoning.encrypted_content"]}
        )
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{turn}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "hmm"}],
            }
        )
        items.append({"type": "function_call", "call_id": f"call_{turn}", "name": "lookup", "arguments": '{"q": "é"}'})
    return bodies


@pytest.mark.parametrize(("source", "turns"), [("messages", messages_turns(6)), ("responses", responses_turns(6))])
def test_each_turn_starts_with_the_previous_turns_bytes(source: Api, turns: list[dict[str, Any]]) -> None:
    translated = [translate_request(body, source, "chat", "upstream") for body in turns]
    for earlier, later in zip(translated, translated[1:], strict=False):
        # The later request, cut to the earlier one's messages, is the earlier request byte for byte: the
        # same system prompt, tools and options, and every message spelt the same way again.
        cut = {**later, "messages": later["messages"][: len(earlier["messages"])]}
        assert encode_body(cut) == encode_body(earlier)
        assert len(later["messages"]) > len(earlier["messages"])
    # Translating the same request twice gives the same bytes (no ids, no timestamps).
    assert encode_body(translate_request(turns[-1], source, "chat", "u")) == encode_body(
        translate_request(turns[-1], source, "chat", "u")
    )


def test_cache_marks_go_where_the_upstream_caches_explicitly() -> None:
    """``cache_control`` reaches a Messages upstream from a chat client that set it (OpenRouter's spelling) and is
    left out of a chat upstream's request, which caches prefixes without marks."""
    mark = {"type": "ephemeral"}
    chat = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "long context", "cache_control": mark}]},
            {"role": "user", "content": "question"},
        ],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}, "cache_control": mark}],
    }
    messages = translate_request(chat, "chat", "messages", "u")
    assert messages["messages"][0]["content"] == [{"type": "text", "text": "long context", "cache_control": mark}]
    assert messages["tools"][0]["cache_control"] == mark
    back = translate_request(
        {"model": "m", "max_tokens": 9, "system": SYSTEM, "tools": TOOLS, "messages": messages["messages"]},
        "messages",
        "chat",
        "u",
    )
    assert "cache_control" not in encode_body(back).decode()
