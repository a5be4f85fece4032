"""Tool call ids as nine letters and digits, for a provider that refuses any other (``outbound.cured``).

An id only links an assistant's tool call to its result within one request; Mistral (and Mistral models' chat
templates on other hosts) refuse any id but nine letters and digits ("Tool call id was toolu_01... but must be a-z,
A-Z, 0-9, with a length of 9"), which another provider's calls (a conversation that moved, or came from Claude) do
not have. Each id is renamed to nine letters and digits of its hash, the same in the call and in its result; the
provider's answer names its own calls, which the client then sends back as they are.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

_SHORT_ID = re.compile(r"[A-Za-z0-9]{9}")
_ALPHANUMERIC = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def short_id(call_id: str) -> str:
    """A tool call id as nine letters and digits: itself if it is so already, else the same nine for the same id."""
    if _SHORT_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).digest()
    return "".join(_ALPHANUMERIC[byte % len(_ALPHANUMERIC)] for byte in digest[:9])


def short_tool_ids(messages: list[Any]) -> list[Any]:
    """Chat ``messages`` with every tool call's id, and every tool message's ``tool_call_id``, as ``short_id``."""
    out: list[Any] = []
    for message in messages:
        if isinstance(message, dict):
            if isinstance(message.get("tool_call_id"), str):
                message = {**message, "tool_call_id": short_id(message["tool_call_id"])}
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                message = {**message, "tool_calls": [_short_call(call) for call in calls]}
        out.append(message)
    return out


def _short_call(call: Any) -> Any:
    return {**call, "id": short_id(call["id"])} if isinstance(call, dict) and isinstance(call.get("id"), str) else call
