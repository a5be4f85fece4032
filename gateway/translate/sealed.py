"""Opaque reasoning held by a client of another API than its maker's, sealed in the one field that API has for it.

Every vendor makes reasoning nobody else can read and asks for it back: Anthropic a signed ``thinking`` block (or a
``redacted_thinking`` block) on the turn after a tool call made while thinking, OpenAI's Responses API a reasoning
item's ``encrypted_content`` (with ``store: false``, the only way its reasoning reaches the next turn), Gemini the
``thought_signature`` of a function call (its chat API: ``extra_content.google.thought_signature`` on the tool call).
Each refuses the others' (a 400). A client keeps what it is given and sends it back as it got it, but only in its own
API's fields: a Messages client keeps a ``redacted_thinking`` block's ``data``, a Responses client a reasoning item's
``encrypted_content`` (when it asked for it: ``include: ["reasoning.encrypted_content"]``, as Codex does; Codex sends
its reasoning items back without their text). So another maker's reasoning goes there sealed, marked as the
gateway's and naming its maker (``Reasoning.maker``), and comes back out on the next turn as the reasoning it was:
to a provider of its maker's API as it was made, to any other without it (``gateway.relay.outbound`` drops sealed
values from what a native provider is sent).

Two forms: ``SIGNED`` (an Anthropic thinking block: its text and signature, which signs that text) and ``OPAQUE``
(any other: its maker and data).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from gateway.translate.ir import TRANSLATABLE, Api, Reasoning

SIGNED = "gateway.thinking.v1:"
"""Marks a sealed Anthropic thinking block (a provider's own opaque value never starts so)."""
OPAQUE = "gateway.opaque.v1:"
"""Marks another maker's sealed opaque reasoning."""
PREFIX = SIGNED
PREFIXES = (SIGNED, OPAQUE)
MARK = "gateway."
"""What every sealed value starts with: a cheap first look for one in a body."""
ASKED = "reasoning.encrypted_content"


def wanted(request: dict[str, Any]) -> bool:
    """Whether the Responses client asked for reasoning it can send back (``include`` names ``ASKED``)."""
    include = request.get("include")
    return isinstance(include, list) and ASKED in include


def _pack(prefix: str, block: dict[str, str]) -> str:
    packed = json.dumps(block, ensure_ascii=False, separators=(",", ":"))
    return prefix + base64.b64encode(packed.encode()).decode()


def seal(part: Reasoning) -> str | None:
    """``part``'s opaque reasoning as one sealed string (None: it has none)."""
    if part.signature is not None:
        return _pack(SIGNED, {"thinking": part.text, "signature": part.signature})
    if part.encrypted is not None and part.maker is not None:
        return _pack(OPAQUE, {"maker": part.maker, "data": part.encrypted})
    return None


def held(part: Reasoning, client: Api) -> str | None:
    """What a client of ``client``'s API holds of ``part``'s opaque reasoning, in the field its API has for it: the
    maker's own value where the client speaks the maker's API, else sealed (None: nothing opaque)."""
    if part.maker == client and part.encrypted is not None:
        return part.encrypted
    return seal(part)


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIXES)


def unseal(value: str) -> Reasoning | None:
    """The reasoning a sealed value holds (its maker's); None for any other value (a provider's own)."""
    prefix = next((p for p in PREFIXES if value.startswith(p)), None)
    if prefix is None:
        return None
    try:
        block = json.loads(base64.b64decode(value[len(prefix) :], validate=True))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(block, dict):
        return None
    if prefix == SIGNED:
        text, signature = block.get("thinking"), block.get("signature")
        if isinstance(text, str) and isinstance(signature, str) and signature:
            return Reasoning(text, signature=signature, maker="messages")
        return None
    maker, data = block.get("maker"), block.get("data")
    if maker in TRANSLATABLE and isinstance(data, str):
        api: Api = maker
        return Reasoning("", encrypted=data, maker=api)
    return None


def read_held(value: str, client: Api) -> Reasoning:
    """An opaque value a client of ``client``'s API sent back: what it sealed (nothing, if that is unreadable: no
    provider could read it), or its own provider's."""
    if value.startswith(PREFIXES):
        return unseal(value) or Reasoning("")
    return Reasoning("", encrypted=value, maker=client)


__all__ = [
    "ASKED",
    "MARK",
    "OPAQUE",
    "PREFIX",
    "PREFIXES",
    "SIGNED",
    "held",
    "is_sealed",
    "read_held",
    "seal",
    "wanted",
]
