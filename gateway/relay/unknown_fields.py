"""Fields a provider refuses as unknown, which the gateway wrote and may leave out (``outbound.cured``).

Mistral (and other servers validating with pydantic's ``extra="forbid"``) refuse any field they do not document:
422 with ``{"type": "extra_forbidden", "loc": ["body", "<field>", ...]}`` in its ``detail`` (Mistral's ``message``
holds it, as an object or as a JSON string). Of a native body the gateway wrote only its usage ask
(``stream_options``); of a translated one it wrote every field, and the optional ones (``DROPPABLE``: hints another
API's request carried, such as Claude Code's user id as ``user``) are left out for a provider that refuses them, as
is the reasoning the translation puts on assistant messages (``reasoning_content``, ``MESSAGE_REASONING``).
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import Any

DROPPABLE = frozenset(
    {
        "stream_options",
        "user",
        "metadata",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
        "verbosity",
        "top_k",
        "parallel_tool_calls",
        "reasoning_effort",
    }
)
"""The optional fields a translation to chat writes that a provider may lack: without them the answer is the same
answer, less a hint."""
MESSAGE_REASONING = "messages.reasoning_content"
"""The name learned for ``reasoning_content`` refused on an assistant message."""


def _loc(*parts: bytes) -> re.Pattern[bytes]:
    """A pydantic error's ``loc`` list that starts with ``parts`` (strings but for an index, ``\\d+``), its quotes
    escaped or not: Mistral's detail may be a JSON string inside its error."""
    quote = rb'\\?"'
    items = [part if part == rb"\d+" else quote + part + quote for part in parts]
    return re.compile(quote + rb"loc" + quote + rb"\s*:\s*\[\s*" + rb"\s*,\s*".join(items))


_FIELD = _loc(rb"body", rb"(\w+)")
_IN_MESSAGE = _loc(rb"body", rb"messages", rb"\d+", rb"assistant", rb"reasoning_content")


def refused_fields(body: bytes) -> set[str]:
    """The fields an error body refuses as unknown (``extra_forbidden`` at their ``loc``); ``stream_options`` also
    where the error only names it (servers that word it "Unrecognized request argument supplied")."""
    found: set[str] = set()
    if b"extra_forbidden" in body:
        found.update(match.decode() for match in _FIELD.findall(body))
        if _IN_MESSAGE.search(body):
            found.add(MESSAGE_REASONING)
    if b"stream_options" in body:
        found.add("stream_options")
    return found


def without_refused(body: dict[str, Any], refused: Container[str]) -> None:
    """Leave out of a translated chat body what its provider refused (``refused_fields``, learned)."""
    for name in DROPPABLE:
        if name in refused:
            body.pop(name, None)
    messages = body.get("messages")
    if MESSAGE_REASONING in refused and isinstance(messages, list):
        body["messages"] = [_without_reasoning(message) for message in messages]


def _without_reasoning(message: Any) -> Any:
    if isinstance(message, dict) and message.get("role") == "assistant" and "reasoning_content" in message:
        return {key: value for key, value in message.items() if key != "reasoning_content"}
    return message
