"""Which conversation a request continues: its session identity, found without reading the whole prompt.

A conversation's next turn is worth more on the deployment that holds its prompt prefix in cache.
To send it there the gateway must know which requests belong together. First found wins:

1. a request header from a configurable list: ``x-session-id`` (the gateway's own, as OpenRouter's)
   and the session headers coding agents send on their own (Claude Code
   ``x-claude-code-session-id``, Codex ``session-id`` / ``session_id``, OpenCode
   ``x-opencode-session``, Amp ``x-amp-thread-id``);
2. the body's ``prompt_cache_key`` (OpenAI's cache-routing hint, passed upstream untouched);
3. a fingerprint of the conversation's stable prefix: the model, the system/developer
   instructions, the tools, and the first user message. Later turns append to the conversation
   and leave this prefix as it was, so every turn of a conversation has the same fingerprint,
   while two conversations that differ anywhere in it never share one. It is used only when the
   prompt is long enough to be cached at all (providers cache prefixes above ~1k tokens),
   estimated from the body's size, never by tokenising it.

The identity is scoped to the client key and the model, so two tenants that happen to send the
same ``x-session-id`` never steer each other's routing; ``key`` is a digest, never the raw value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

SessionSource = Literal["header", "prompt_cache_key", "fingerprint"]

DEFAULT_SESSION_HEADERS: tuple[str, ...] = (
    "x-session-id",
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "x-opencode-session",
    "x-amp-thread-id",
)
DEFAULT_MIN_CACHEABLE_TOKENS = 1024
MAX_SESSION_VALUE = 256
"""Longer header values or keys are not session ids (OpenRouter caps ``x-session-id`` at 256 too)."""
BYTES_PER_TOKEN = 4
"""The cheap estimate of a body's size in tokens, as the rest of the request path uses."""


@dataclass(frozen=True, slots=True)
class SessionId:
    """A conversation's identity: ``key`` (a hex digest, safe to store and log) and where it came from."""

    key: str
    source: SessionSource


def session_of(
    headers: Iterable[tuple[str, str]],
    body: Mapping[str, Any],
    *,
    model: str,
    scope: str,
    body_bytes: int,
    header_names: Sequence[str] = DEFAULT_SESSION_HEADERS,
    min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS,
) -> SessionId | None:
    """The request's session, or None when it names none and is too short to be worth a fingerprint.

    ``headers`` are lower-cased (name, value) pairs; ``scope`` is the client key's id (so tenants
    stay apart); ``body_bytes`` the body's size, for the cheap length estimate.
    """
    if header_names:
        lowered, wanted = _lowered(header_names)
        found: dict[str, str] | None = None  # a plain loop, no comprehension; a dict only once a named header is seen
        for name, text in headers:
            if name in wanted:
                if found is None:
                    found = {}
                found[name] = text.strip()
        if found:
            for name in lowered:
                value = found.get(name)
                if value and len(value) <= MAX_SESSION_VALUE:
                    return SessionId(_digest(scope, model, "header", value), "header")
    cache_key = body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key.strip() and len(cache_key) <= MAX_SESSION_VALUE:
        return SessionId(_digest(scope, model, "prompt_cache_key", cache_key), "prompt_cache_key")
    if body_bytes // BYTES_PER_TOKEN < min_cacheable_tokens:
        return None
    prefix = stable_prefix(body)
    if prefix is None:
        return None
    return SessionId(_digest(scope, model, "fingerprint", _canonical(prefix)), "fingerprint")


_LOWERED: dict[tuple[str, ...], tuple[tuple[str, ...], frozenset[str]]] = {}
"""Each list of session header names seen (a policy's: a handful per config), lower-cased, and as a set."""


def _lowered(header_names: Sequence[str]) -> tuple[tuple[str, ...], frozenset[str]]:
    """``header_names`` lower-cased in their order, and the set of them: made once per list, not per request."""
    if not isinstance(header_names, tuple):
        lowered = tuple(name.lower() for name in header_names)
        return lowered, frozenset(lowered)
    known = _LOWERED.get(header_names)
    if known is None:
        lowered = tuple(name.lower() for name in header_names)
        if len(_LOWERED) >= 64:  # a bound, for a caller making up lists: policies hold a few
            _LOWERED.clear()
        known = _LOWERED[header_names] = (lowered, frozenset(lowered))
    return known


def stable_prefix(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The part of a conversation that later turns leave as it was; None when there is no user turn yet.

    Chat (``messages``) and Anthropic Messages (``system`` + ``messages``): the system/developer
    messages before the first user message, that first user message, and the tools. Responses
    (``input``): the ``instructions``, the input items up to the first user message, and the tools.
    """
    tools = body.get("tools")
    if isinstance(body.get("messages"), list):
        opening = _opening(body["messages"])
        if opening is None:
            return None
        return {"system": body.get("system"), "opening": opening, "tools": tools}
    items = body.get("input")
    if isinstance(items, str):
        return {"instructions": body.get("instructions"), "opening": [items], "tools": tools}
    if isinstance(items, list):
        opening = _opening(items)
        if opening is None:
            return None
        return {"instructions": body.get("instructions"), "opening": opening, "tools": tools}
    return None


def _opening(turns: list[Any]) -> list[Any] | None:
    """The turns up to and including the first user turn (instructions first, then the question)."""
    for index, turn in enumerate(turns):
        if isinstance(turn, dict) and turn.get("role") == "user":
            return turns[: index + 1]
        if isinstance(turn, str):  # a bare string input item is a user message
            return turns[: index + 1]
    return None


def _canonical(value: Any) -> str:
    # Sorted keys and JSON quoting: equal prefixes encode alike, and no two different ones do
    # (concatenating texts would let "ab"+"c" meet "a"+"bc").
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _digest(scope: str, model: str, source: SessionSource, value: str) -> str:
    material = json.dumps([scope, model, source, value], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:32]
