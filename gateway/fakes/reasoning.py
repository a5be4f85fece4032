"""Opaque reasoning as each vendor makes it and checks it, so that a test meets the 400 a provider would answer.

Anthropic signs its thinking (``SIGNATURE``) and may redact it (``REDACTED``, with ``opaque_reasoning``); OpenAI's
Responses API encrypts a reasoning item (``ENCRYPTED``, with ``opaque_reasoning``, when ``include`` asks for it);
Gemini's chat API signs a function call (``THOUGHT_SIGNATURE`` in ``extra_content.google.thought_signature``, with
``opaque_reasoning``). With ``check_thinking``, each refuses opaque reasoning it did not make, and Anthropic and Gemini
a tool loop whose calling turn lost theirs (``fault``).
"""

from __future__ import annotations

from typing import Any

from gateway.fakes.behavior import FakeBehavior

SIGNATURE = "fake-signature"
"""The signature of every thinking block this fake writes (and the only one it accepts)."""
REDACTED = "fake-redacted-thinking"
ENCRYPTED = "fake-encrypted-content"
THOUGHT_SIGNATURE = "fake-thought-signature"
SKIP_VALIDATOR = "skip_thought_signature_validator"
"""The value Gemini documents and takes in place of a signature it did not make (history from elsewhere)."""


def gemini_signed() -> dict[str, Any]:
    """The member of a tool call (whole, or its first delta) that carries this fake's thought signature."""
    return {"extra_content": {"google": {"thought_signature": THOUGHT_SIGNATURE}}}


def fault(path: str, body: dict[str, Any], behavior: FakeBehavior) -> str | None:
    """Why the provider refuses the request's reasoning (None: it does not)."""
    if not behavior.check_thinking:
        return None
    if path.endswith("/messages"):
        return _foreign_blocks(body) or thinking_fault(body)
    if path.endswith("/responses"):
        return _foreign_items(body)
    if path.endswith("/chat/completions") and behavior.opaque_reasoning:
        return _unsigned_calls(body)
    return None


def _turns(body: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [(i, m) for i, m in enumerate(body.get("messages") or ()) if isinstance(m, dict)]


def _foreign_blocks(body: dict[str, Any]) -> str | None:
    """Anthropic checks every signature and redacted block in the history, whoever's turn it is."""
    for index, message in _turns(body):
        content = message.get("content")
        for number, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            where = f"messages.{index}.content.{number}"
            if block.get("type") == "thinking" and block.get("signature") != SIGNATURE:
                return f"{where}: Invalid `signature` in `thinking` block"
            if block.get("type") == "redacted_thinking" and block.get("data") != REDACTED:
                return f"{where}: Invalid `data` in `redacted_thinking` block"
    return None


def thinking_fault(body: dict[str, Any]) -> str | None:
    """Anthropic's refusal of a request with thinking on whose last assistant turn called a tool without first
    giving back the thinking block, signed (or redacted), that the model wrote before the call (None: no fault)."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    turns = _turns(body)
    index, last = next(((i, m) for i, m in reversed(turns) if m.get("role") == "assistant"), (0, {}))
    blocks = [b for b in last.get("content") or () if isinstance(b, dict)] if isinstance(last, dict) else []
    if not any(b.get("type") == "tool_use" for b in blocks):
        return None
    first = blocks[0]
    if first.get("type") == "redacted_thinking" or first.get("signature") == SIGNATURE:
        return None
    if first.get("type") == "thinking":
        return f"messages.{index}.content.0: Invalid `signature` in `thinking` block"
    return (
        f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first.get('type')}`."
        " When `thinking` is enabled, a final `assistant` message must start with a thinking block"
    )


def _foreign_items(body: dict[str, Any]) -> str | None:
    """OpenAI decrypts every reasoning item's ``encrypted_content``: another's cannot be."""
    items = body.get("input")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, dict) and item.get("type") == "reasoning":
            content = item.get("encrypted_content")
            if content is not None and content != ENCRYPTED:
                return f"The encrypted content for item input[{index}] could not be verified."
    return None


def _unsigned_calls(body: dict[str, Any]) -> str | None:
    """Gemini checks the current turn (since the user's last message): each step's first function call must carry
    the thought signature it was given, or the placeholder for a call it did not make."""
    turns = _turns(body)
    start = next((n for n, (_, m) in reversed(list(enumerate(turns))) if m.get("role") == "user"), -1)
    for index, message in turns[start + 1 :]:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            continue
        given = calls[0].get("extra_content")
        signature = given.get("google", {}).get("thought_signature") if isinstance(given, dict) else None
        if signature is None:
            name = (calls[0].get("function") or {}).get("name")
            return (
                "Function call is missing a thought_signature in functionCall parts. This is required for tools to"
                f" work correctly. Additional data, function call `default_api:{name}` , position {index + 1}."
            )
        if signature not in (THOUGHT_SIGNATURE, SKIP_VALIDATOR):
            return f"Corrupted thought signature (messages[{index}].tool_calls[0])."
    return None


__all__ = [
    "ENCRYPTED",
    "REDACTED",
    "SIGNATURE",
    "SKIP_VALIDATOR",
    "THOUGHT_SIGNATURE",
    "fault",
    "gemini_signed",
    "thinking_fault",
]
