"""A whole Messages answer in the neutral shape, and back: its content blocks, stop reason and usage.

Reasoning goes to a Messages client as a ``thinking`` block with the signature it has (empty when another API
reasoned: none can be made up); another maker's opaque reasoning (a Responses item's ``encrypted_content``, Gemini's
thought signature) as a ``redacted_thinking`` block holding it sealed, as a stream gives it, so that the next turn
takes it back to a provider of that API, and to no other.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.dialects.base import listed
from gateway.translate import sealed
from gateway.translate.ir import (
    Part,
    Reasoning,
    Reply,
    ToolCall,
    Usage,
)
from gateway.translate.messages import STOP_OF, STOPS, read_block
from gateway.translate.messages_write import write_block


def read_usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None

    def number(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cached, created = number("cache_read_input_tokens"), number("cache_creation_input_tokens")
    return Usage(number("input_tokens") + cached + created, number("output_tokens"), cached, created)


def write_usage(usage: Usage) -> dict[str, Any]:
    fresh = max(0, usage.input_tokens - usage.cached_tokens - usage.cache_creation_tokens)
    return {
        "input_tokens": fresh,
        "cache_creation_input_tokens": usage.cache_creation_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.output_tokens,
    }


def read_reply(body: dict[str, Any]) -> Reply:
    parts: list[Part] = []
    for index, raw in enumerate(listed(body.get("content"))):
        if isinstance(raw, dict) and raw.get("type") in ("text", "tool_use", "thinking", "redacted_thinking"):
            part = read_block(raw, f"content[{index}]")
            if part is not None:
                parts.append(part)
    return Reply(
        id=str(body.get("id") or ""),
        model=str(body.get("model") or ""),
        parts=parts,
        stop=STOPS.get(str(body.get("stop_reason")), "end"),
        stop_sequence=body.get("stop_sequence") if isinstance(body.get("stop_sequence"), str) else None,
        usage=read_usage(body.get("usage")),
    )


def reply_blocks(part: Part) -> list[dict[str, Any]]:
    """One answer part as the client's Messages API shows it: reasoning as a ``thinking`` block with the signature
    it has, its opaque form (if any) as a ``redacted_thinking`` block after it: Anthropic's own as it made it,
    another maker's sealed (``gateway.translate.sealed``)."""
    if isinstance(part, Reasoning):
        blocks = [{"type": "thinking", "thinking": part.text, "signature": part.signature or ""}] if part.text else []
        opaque = sealed.held(part, "messages") if part.signature is None else None
        if opaque is not None:
            blocks.append({"type": "redacted_thinking", "data": opaque})
        return blocks
    if isinstance(part, ToolCall):
        try:
            arguments = json.loads(part.arguments) if part.arguments.strip() else {}
        except ValueError:
            arguments = {}
        return [{"type": "tool_use", "id": part.id, "name": part.name, "input": arguments}]
    block = write_block(part)
    return [] if block is None else [block]


def write_reply(reply: Reply, model: str, message_id: str) -> dict[str, Any]:
    content = [block for part in reply.parts for block in reply_blocks(part)]
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_OF[reply.stop],
        "stop_sequence": reply.stop_sequence,
        "usage": write_usage(reply.usage or Usage()),
    }
