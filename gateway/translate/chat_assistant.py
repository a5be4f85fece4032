"""A chat assistant message in the neutral shape, and back: its reasoning text, content, tool calls, and the opaque
reasoning that rides on a tool call.

Gemini's OpenAI-compatible API gives a function call's thought signature as ``extra_content.google.thought_signature``
on the tool call (in a stream, on the delta that carries the call) and refuses the next turn of a function call
without it. It is read as opaque reasoning made by a chat provider (``Reasoning.maker``), a part just before the call
it rides on, and written back on the call that follows it only in chat (elsewhere it is sealed for the client, or
left out: ``gateway.translate.sealed``). Where the client kept none (a Responses client that did not ask for
encrypted reasoning, a tool call another provider made), Google's documented placeholder stands in for it
(``with_placeholders``), for a deployment known to need one.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects.chat_events import content_thinking
from gateway.translate.common import as_dict, as_list, as_str, obj, opt_str
from gateway.translate.ir import Part, Reasoning, Text, ToolCall, Turn, Untranslatable

PLACEHOLDER = "skip_thought_signature_validator"
"""The thought signature Google documents for a function call it did not make (or whose signature was lost)."""


def thought_signature(call: dict[str, Any]) -> str | None:
    """The thought signature on a chat tool call (Gemini's ``extra_content.google.thought_signature``), if any."""
    signature = obj(obj(call.get("extra_content")).get("google")).get("thought_signature")
    return signature if isinstance(signature, str) and signature else None


def signed(signature: str) -> dict[str, Any]:
    """The tool call's member that carries a thought signature back to the provider that made it."""
    return {"google": {"thought_signature": signature}}


DETAIL_TEXTS = {"reasoning.text": "text", "reasoning.summary": "summary"}
"""OpenRouter's ``reasoning_details`` kinds that hold reasoning text, and the member that holds it."""


def reasoning_text(holder: dict[str, Any]) -> str:
    """The reasoning text of a chat message or stream delta: ``reasoning_content`` (DeepSeek, vLLM), else
    ``reasoning`` (OpenRouter, Groq, Ollama), else the text kinds of OpenRouter's ``reasoning_details`` in order.

    OpenRouter sends the same text in ``reasoning`` and in its details when it sends both, and sometimes only the
    details (``reasoning`` null): they are read only when neither field holds text, never twice. A
    ``reasoning.encrypted`` detail (``data``) and a text detail's ``signature`` are left out: only OpenRouter can read
    them, on the ``reasoning_details`` of the next turn's assistant message, a field no other API has a place for."""
    for name in ("reasoning_content", "reasoning"):
        value = holder.get(name)
        if isinstance(value, str) and value:
            return value
    details = holder.get("reasoning_details")
    texts: list[str] = []
    for detail in details if isinstance(details, list) else ():
        member = DETAIL_TEXTS.get(str(detail.get("type"))) if isinstance(detail, dict) else None
        text = detail.get(member) if member is not None else None
        if isinstance(text, str):
            texts.append(text)
    return "".join(texts)


def read_assistant(message: dict[str, Any], path: str) -> Turn:
    parts: list[Part] = []
    reasoning = reasoning_text(message)
    if reasoning:
        parts.append(Reasoning(reasoning))
    content = message.get("content")
    plain = isinstance(content, str)
    if isinstance(content, str):
        if content:
            parts.append(Text(content))
    elif content is not None:
        for index, raw in enumerate(as_list(content, f"{path}.content")):
            part = as_dict(raw, f"{path}.content[{index}]")
            if part.get("type") == "thinking":  # Mistral's reasoning models: their reasoning as a content part
                parts.append(Reasoning(content_thinking([part])))
                continue
            if part.get("type") not in ("text", "refusal"):
                raise Untranslatable(f"{path}.content[{index}].type", "other", f"a {part.get('type')!r} part")
            parts.append(Text(as_str(part.get("text", part.get("refusal")), f"{path}.content[{index}].text")))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append(Text(refusal))  # OpenAI's refusal (content null): what the model said, as its content parts are
    for index, raw in enumerate(as_list(message.get("tool_calls") or [], f"{path}.tool_calls")):
        where = f"{path}.tool_calls[{index}]"
        call = as_dict(raw, where)
        function = as_dict(call.get("function"), f"{where}.function")
        signature = thought_signature(call)
        if signature is not None:
            parts.append(Reasoning("", encrypted=signature, maker="chat"))
        parts.append(
            ToolCall(
                as_str(call.get("id"), f"{where}.id"),
                as_str(function.get("name"), f"{where}.function.name"),
                as_str(function.get("arguments") or "{}", f"{where}.function.arguments"),
            )
        )
    if message.get("function_call") is not None:
        raise Untranslatable(f"{path}.function_call", "other", "the legacy function_call (use tool_calls)")
    return Turn("assistant", parts, plain and len(parts) == 1, opt_str(message.get("name"), f"{path}.name"))


def assistant_message(turn: Turn) -> dict[str, Any]:
    """The turn as a chat assistant message: reasoning text as ``reasoning_content``, a chat provider's thought
    signature on the tool call after it; other makers' opaque reasoning is left out (no chat provider reads it)."""
    texts = [p.text for p in turn.parts if isinstance(p, Text)]
    thoughts = [p.text for p in turn.parts if isinstance(p, Reasoning) and p.text]
    calls: list[dict[str, Any]] = []
    signature: str | None = None
    for part in turn.parts:
        if isinstance(part, Reasoning) and part.opaque_for("chat"):
            signature = part.encrypted
        elif isinstance(part, ToolCall):
            call: dict[str, Any] = {"id": part.id, "type": "function"}
            call["function"] = {"name": part.name, "arguments": part.arguments}
            if signature is not None:
                call["extra_content"] = signed(signature)
                signature = None
            calls.append(call)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if thoughts:
        message["reasoning_content"] = "\n\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    if turn.name is not None:
        message["name"] = turn.name
    return message


def with_placeholders(messages: list[Any]) -> list[Any] | None:
    """``messages`` (a chat request's) with ``PLACEHOLDER`` on each tool call of the current turn (since the user's
    last message, what Gemini checks) that lacks a thought signature, in each assistant message none of whose calls
    has one (Gemini signs only the first of parallel calls); None when none lacks one. Only what changes is copied:
    the list may be shared by other attempts of the request."""
    start = next((n for n in range(len(messages) - 1, -1, -1) if obj(messages[n]).get("role") == "user"), -1)
    out: list[Any] | None = None
    for index in range(start + 1, len(messages)):
        message = obj(messages[index])
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not isinstance(calls, list) or not calls:
            continue
        if any(isinstance(call, dict) and thought_signature(call) is not None for call in calls):
            continue
        placed = [{**call, "extra_content": signed(PLACEHOLDER)} if isinstance(call, dict) else call for call in calls]
        if out is None:
            out = list(messages)
        out[index] = {**message, "tool_calls": placed}
    return out
