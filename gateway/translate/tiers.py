"""``service_tier`` across the APIs: the processing tier a client asks for, and the one its answer was served at.

Chat Completions and Responses share OpenAI's tiers, the same values in both, so a tier asked in one is carried to
the other as it is. The Messages API has its own (``auto``: Anthropic's Priority Tier capacity when the account has
it, else standard; ``standard_only``); where a tier means the same in both it is carried, and where it does not
(OpenAI's ``flex``, ``scale``, ``priority``: Anthropic's priority capacity is the account's, asked for only through
``auto``) it is left out with no error: the deployment serves the request at its own default tier, the answer meaning
the same (approx.: it may come slower, or at another price). The neutral shape holds OpenAI's name of the tier.

An answer says the tier it was served at (chat and Responses: ``service_tier``; Messages: ``usage.service_tier``,
``standard``, ``priority`` or ``batch``), given back to the client in its own API's field where it has a name there.
"""

from __future__ import annotations

from typing import Any

from gateway.translate.ir import Api

OPENAI_TIERS = ("auto", "default", "flex", "scale", "priority", "fast", "ultrafast")
"""OpenAI's processing tiers, the same in Chat Completions and Responses (Codex's fast mode asks ``priority``)."""
MESSAGES_TIERS = ("auto", "standard_only")

ASKED: dict[Api, dict[str, str]] = {
    "chat": {tier: tier for tier in OPENAI_TIERS},
    "responses": {tier: tier for tier in OPENAI_TIERS},
    "messages": {"auto": "auto", "standard_only": "default"},
}
"""Per API, each ``service_tier`` a request may ask → the neutral (OpenAI's) tier. Written back through the inverse:
a neutral tier the target has no name for is left out."""

SERVED: dict[Api, dict[str, str]] = {
    "chat": {tier: tier for tier in ("default", "flex", "scale", "priority")},
    "responses": {tier: tier for tier in ("default", "flex", "scale", "priority")},
    "messages": {"standard": "default", "priority": "priority"},
}
"""Per API, each tier an answer may say it was served at → the neutral tier (Anthropic's ``batch`` has none: the
Batches API's, never a translated request's)."""


def _inverse(table: dict[str, str], tier: str | None) -> str | None:
    return next((own for own, neutral in table.items() if neutral == tier), None) if tier is not None else None


def read_asked(api: Api, body: dict[str, Any]) -> str | None:
    """The neutral tier a request in ``api`` asks for (None: none, or a value outside the table)."""
    tier = body.get("service_tier")
    return ASKED[api].get(tier) if isinstance(tier, str) else None


def write_asked(api: Api, tier: str | None) -> str | None:
    """The ``service_tier`` a request in ``api`` asks for the neutral ``tier`` (None: leave it out)."""
    return _inverse(ASKED[api], tier)


def read_served(api: Api, answer: dict[str, Any]) -> str | None:
    """The neutral tier an answer (a whole body, a chat chunk, a Responses ``response`` or a Messages message or
    ``message_delta``) says it was served at."""
    holder = answer.get("usage") if api == "messages" else answer
    tier = holder.get("service_tier") if isinstance(holder, dict) else None
    return SERVED[api].get(tier) if isinstance(tier, str) else None


def write_served(api: Api, answer: dict[str, Any], tier: str | None) -> None:
    """Say in ``answer`` (a whole body or a chat chunk; a Messages message's or ``message_delta``'s with its usage)
    that it was served at the neutral ``tier``, where ``api`` has a name for it."""
    own = _inverse(SERVED[api], tier)
    if own is None:
        return
    if api == "messages":
        if isinstance(answer.get("usage"), dict):
            answer["usage"]["service_tier"] = own
    else:
        answer["service_tier"] = own


__all__ = [
    "ASKED",
    "MESSAGES_TIERS",
    "OPENAI_TIERS",
    "SERVED",
    "read_asked",
    "read_served",
    "write_asked",
    "write_served",
]
