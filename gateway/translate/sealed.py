"""Anthropic's signed thinking carried through a Responses client, sealed in a reasoning item's ``encrypted_content``.

A Messages deployment signs each thinking block, and Anthropic asks for the block back, signed, on the turn after a
tool call made while thinking (else a 400: "a final assistant message must start with a thinking block"). A
Responses client keeps no reasoning text to send back (Codex returns its reasoning items with ``content: null``) but
returns ``encrypted_content`` as it got it, when it asked for it (``include: ["reasoning.encrypted_content"]``, as
Codex does with ``store: false``). So the block's text and signature go there, marked as the gateway's, and come
back out as the signed block on the next turn: to a Messages deployment as it was, to chat as reasoning text.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

PREFIX = "gateway.thinking.v1:"
"""Marks a sealed block (a provider's own ``encrypted_content`` never starts so)."""
ASKED = "reasoning.encrypted_content"


def wanted(request: dict[str, Any]) -> bool:
    """Whether the Responses client asked for reasoning it can send back (``include`` names ``ASKED``)."""
    include = request.get("include")
    return isinstance(include, list) and ASKED in include


def seal(text: str, signature: str) -> str:
    """A signed thinking block as an ``encrypted_content`` value."""
    packed = json.dumps({"thinking": text, "signature": signature}, ensure_ascii=False, separators=(",", ":"))
    return PREFIX + base64.b64encode(packed.encode()).decode()


def unseal(value: str) -> tuple[str, str] | None:
    """(text, signature) of a sealed block; None for any other value (a provider's own opaque reasoning)."""
    if not value.startswith(PREFIX):
        return None
    try:
        block = json.loads(base64.b64decode(value[len(PREFIX) :], validate=True))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(block, dict):
        return None
    text, signature = block.get("thinking"), block.get("signature")
    return (text, signature) if isinstance(text, str) and isinstance(signature, str) and signature else None


__all__ = ["ASKED", "PREFIX", "seal", "unseal", "wanted"]
