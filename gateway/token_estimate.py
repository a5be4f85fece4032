"""A Messages request's input tokens, counted by the gateway when no deployment can count them.

``/v1/messages/count_tokens`` is Anthropic's; many hosts that speak the Messages API lack it, and
Claude Code calls it to size its context. When no deployment answers, the prompt is counted with
the gateway's pinned encoding (``gateway.tokens``) over what the model reads: the system prompt,
every message's text, tool calls' inputs and tool results, and the tool definitions. Images and
documents count as their text parts only. It is an estimate (another tokenizer than the model's),
which the endpoint says in its ``x-gateway-count: estimated`` header.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.tokens import TokenCounter

PER_MESSAGE_TOKENS = 3
"""Framing each message costs beyond its text (role and separators), as chat templates add."""


def _texts(content: object) -> list[str]:
    """The text an ``content`` field holds: a string, or blocks of text, tool calls and tool results."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            texts.append(block["thinking"])
        elif kind == "tool_use":
            texts.append(str(block.get("name", "")))
            texts.append(json.dumps(block.get("input", {}), ensure_ascii=False))
        elif kind == "tool_result":
            texts.extend(_texts(block.get("content")))
    return texts


def estimate_input_tokens(body: dict[str, Any], counter: TokenCounter) -> int:
    """The input tokens of a Messages request body, counted with ``counter``'s encoding."""
    texts = _texts(body.get("system"))
    messages = body.get("messages")
    framing = 0
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                texts.extend(_texts(message.get("content")))
                framing += PER_MESSAGE_TOKENS
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        texts.append(json.dumps(tools, ensure_ascii=False))
    return framing + sum(counter.count(text) for text in texts if text)


__all__ = ["estimate_input_tokens"]
