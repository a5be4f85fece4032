"""A request in the neutral shape written as Anthropic's Messages API (reading it: ``gateway.translate.messages``).

Writing keeps ``cache_control`` where the client put it (Anthropic caches only what is marked), writes reasoning only
where Anthropic made it (a signed thinking block, a ``redacted_thinking`` block: it refuses any other), so that a
request answering tool results whose calling turn has none asks no extended thinking (Anthropic would refuse it), a
tool result's error as
``is_error``, and tool-call ids as Anthropic accepts them (``tool_id``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.translate.common import write_tool
from gateway.translate.ir import (
    Conversation,
    Document,
    Image,
    Part,
    Reasoning,
    ReasoningAsk,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Turn,
    Untranslatable,
)

TARGET = "Messages"
_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
DEFAULT_MAX_TOKENS = 4096
"""What a Messages request asks when the client set no limit (the Messages API requires one), beside thinking."""
BUDGETS = {"low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768}
"""OpenAI's reasoning efforts as thinking budgets, in the same order: ``xhigh`` (OpenAI's step above ``high``) thinks
more than ``high`` does, never less."""


# -- request: neutral → Messages -------------------------------------------------------------


def tool_id(value: str) -> str:
    """A tool-call id as Anthropic accepts it (letters, digits, ``_``, ``-``): the same id every turn."""
    return _ID_CHARS.sub("_", value) or "toolu_"


def write_request(conversation: Conversation, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": conversation.max_tokens or DEFAULT_MAX_TOKENS}
    if conversation.system:
        if conversation.system_plain and len(conversation.system) == 1 and conversation.system[0].cache is None:
            body["system"] = conversation.system[0].text
        else:
            body["system"] = [_cached({"type": "text", "text": i.text}, i.cache) for i in conversation.system]
    if any(turn.name is not None for turn in conversation.turns):
        raise Untranslatable("messages[].name", TARGET, "a participant's name")
    if conversation.metadata is not None:
        raise Untranslatable("metadata", TARGET, "only metadata.user_id (from user) is carried")
    body["messages"] = [_message(turn) for turn in conversation.turns]
    choice = conversation.tool_choice
    allowed = choice.allowed if choice is not None else None
    tools = [t for t in conversation.tools if allowed is None or t.name in allowed]
    if tools:
        body["tools"] = [_tool(t) for t in tools]
    mode = choice.mode if choice is not None else "auto"
    if (choice is not None or conversation.parallel_tool_calls is False) and (tools or mode in ("required", "tool")):
        # Anthropic takes a tool choice only beside tools; without any, "auto", "none" and the parallel flag ask
        # nothing (OpenAI's clients send ``parallel_tool_calls`` on every call, tools or not).
        spec: dict[str, Any] = {"type": {"required": "any"}.get(mode, mode)}
        if choice is not None and choice.mode == "tool":
            spec["name"] = choice.name
        if conversation.parallel_tool_calls is not None and mode != "none":
            spec["disable_parallel_tool_use"] = not conversation.parallel_tool_calls
        body["tool_choice"] = spec
    if conversation.temperature is not None and conversation.temperature > 1:
        # OpenAI's APIs take 0 to 2, Anthropic's 0 to 1: a hotter ask has no equal there (clamped, it would be a
        # cooler answer than asked; sent, a 400 the deployment is blamed for).
        raise Untranslatable("temperature", TARGET, "above 1 (the Messages API takes 0 to 1)")
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(conversation, name)
        if value is not None:
            body[name] = value
    if conversation.stop is not None:
        body["stop_sequences"] = conversation.stop
    if conversation.user is not None:
        body["metadata"] = {"user_id": conversation.user}
    reasoning = conversation.reasoning
    if reasoning is not None:
        budget = _budget(reasoning)
        if conversation.max_tokens is None and budget is not None:
            # Thinking counts against max_tokens: without the client's limit, the default is the answer's room.
            body["max_tokens"] = DEFAULT_MAX_TOKENS + budget
        body["thinking"] = _thinking(reasoning, body["max_tokens"])
        kind = body["thinking"]["type"]
        forced = body.get("tool_choice", {}).get("type") in ("any", "tool")
        if (forced and kind != "disabled") or (kind != "disabled" and _unsigned_tool_loop(conversation.turns)):
            # Anthropic refuses thinking beside a forced tool call, and (400: "expected thinking or
            # redacted_thinking") on a request that answers tool results unless the turn that called the tools
            # starts with its signed thinking, which only a Messages client can send back: this request goes
            # without thinking (the next turn thinks).
            body["thinking"] = {"type": "disabled"}
    output = conversation.output
    if output is not None and output.kind == "json_schema":
        # The GA field: the beta's top-level ``output_format`` is refused without its beta header.
        body["output_config"] = {"format": {"type": "json_schema", "schema": output.schema or {}}}
    elif output is not None and output.kind == "json_object":
        raise Untranslatable("response_format", TARGET, "JSON mode without a schema")
    if conversation.stream:
        body["stream"] = True
    return body


def _unsigned_tool_loop(turns: list[Turn]) -> bool:
    """Whether the request answers tool results (after the last assistant turn: Anthropic joins the user turns that
    follow it into one) whose calling turn does not start with Anthropic's own (signed or redacted) thinking."""
    last = max((i for i, turn in enumerate(turns) if turn.role == "assistant"), default=None)
    if last is None or not any(isinstance(p, ToolResult) for turn in turns[last + 1 :] for p in turn.parts):
        return False
    first = turns[last].parts[0] if turns[last].parts else None
    return not (isinstance(first, Reasoning) and first.opaque_for("messages"))


def _budget(reasoning: ReasoningAsk) -> int | None:
    """The thinking budget asked, in tokens (None: thinking off, or adaptive)."""
    if not reasoning.enabled or reasoning.effort in ("none", "minimal") or reasoning.adaptive:
        return None
    if reasoning.budget_tokens is not None:
        return reasoning.budget_tokens
    return BUDGETS.get(reasoning.effort or "medium", BUDGETS["medium"])


def _thinking(reasoning: ReasoningAsk, max_tokens: int) -> dict[str, Any]:
    budget = _budget(reasoning)
    if budget is None:
        off = not reasoning.enabled or reasoning.effort in ("none", "minimal")
        return {"type": "disabled" if off else "adaptive"}
    # Anthropic asks for a budget of at least 1024, below max_tokens: an answer limited to 1024 tokens or less
    # has no room to think.
    if max_tokens <= 1024:
        return {"type": "disabled"}
    return {"type": "enabled", "budget_tokens": max(1024, min(budget, max_tokens - 1))}


def _cached(block: dict[str, Any], cache: dict[str, Any] | None) -> dict[str, Any]:
    if cache is not None:
        block["cache_control"] = cache
    return block


def _message(turn: Turn) -> dict[str, Any]:
    if turn.plain and len(turn.parts) == 1 and isinstance(turn.parts[0], Text) and turn.parts[0].cache is None:
        return {"role": turn.role, "content": turn.parts[0].text}
    blocks: list[dict[str, Any]] = []
    for part in sorted(turn.parts, key=lambda p: not isinstance(p, ToolResult)):  # results first, as Anthropic asks
        block = write_block(part)
        if block is not None:
            blocks.append(block)
    return {"role": turn.role, "content": blocks}


def write_block(part: Part) -> dict[str, Any] | None:
    if isinstance(part, Text):
        return _cached({"type": "text", "text": part.text}, part.cache)
    if isinstance(part, Image):
        return _cached({"type": "image", "source": _source(part)}, part.cache)
    if isinstance(part, Document):
        return _cached(_document(part), part.cache)
    if isinstance(part, ToolCall):
        try:
            arguments = json.loads(part.arguments) if part.arguments.strip() else {}
        except ValueError as exc:
            raise Untranslatable("tool call arguments", TARGET, "arguments that are not a JSON object") from exc
        if not isinstance(arguments, dict):
            raise Untranslatable("tool call arguments", TARGET, "arguments that are not a JSON object")
        block = {"type": "tool_use", "id": tool_id(part.id), "name": part.name, "input": arguments}
        return _cached(block, part.cache)
    if isinstance(part, ToolResult):
        content: str | list[dict[str, Any]]
        if part.plain and all(isinstance(p, Text) for p in part.content):
            content = "".join(p.text for p in part.content if isinstance(p, Text))
        else:
            content = [b for b in (write_block(p) for p in part.content) if b is not None]
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id(part.call_id), "content": content}
        if part.is_error:
            result["is_error"] = True
        return _cached(result, part.cache)
    if not part.opaque_for("messages"):
        # Reasoning without Anthropic's signature (readable text, or another maker's opaque reasoning, which
        # Anthropic refuses) cannot be checked: left out.
        return None
    if part.signature is not None:
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    return {"type": "redacted_thinking", "data": part.encrypted}


def _source(image: Image) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "url", "url": image.url}
    return {"type": "base64", "media_type": image.media_type or "image/png", "data": image.data or ""}


def _document(document: Document) -> dict[str, Any]:
    source: dict[str, Any] = {"type": "url", "url": document.url}
    if document.url is None:
        source = {"type": "base64", "media_type": document.media_type or "application/pdf", "data": document.data or ""}
    block: dict[str, Any] = {"type": "document", "source": source}
    if document.filename is not None:
        block["title"] = document.filename
    return block


def _tool(tool: Tool) -> dict[str, Any]:
    return _cached(write_tool(tool, "input_schema"), tool.cache)
