"""The ``[responses]`` keys: who keeps a Responses conversation, and for how long the gateway does.

The Responses API is stateful: ``store: true`` (its default) keeps each response, and a follow-up
names it by ``previous_response_id``. A deployment that speaks the Responses API keeps that state
itself (the gateway binds the id to it, ``gateway.sessions.response_owners``); one reached by translation
cannot, so the gateway keeps the conversation (``gateway.conversations``). ``state = "gateway"``
keeps it in the gateway for native deployments too, so that a follow-up may go to any deployment
rather than back to the one that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.toml_reader import TableReader

ResponsesState = Literal["provider", "gateway"]
RESPONSES_STATES: tuple[ResponsesState, ...] = ("provider", "gateway")


@dataclass(frozen=True, slots=True)
class ResponsesConfig:
    state: ResponsesState = "provider"
    """Who keeps the conversation of an answer from a deployment that speaks the Responses API natively:
    ``provider`` (follow-ups go back to it) or ``gateway``. An answer by translation is always kept here."""
    ttl_s: float = 86_400.0
    """How long the gateway keeps a stored conversation (input and output items) after its answer."""
    max_memory_bytes: int = 256 * 1024 * 1024
    """Bound of the conversations kept in this process (all of them without Redis; a cache in front of it
    with Redis): past it, the least recently used go first."""


def parse_responses(table: TableReader) -> ResponsesConfig:
    default = ResponsesConfig()
    config = ResponsesConfig(
        state=table.choice("state", RESPONSES_STATES, default.state),
        ttl_s=table.number("ttl_s", default.ttl_s, positive=True),
        max_memory_bytes=table.integer("max_memory_bytes", default.max_memory_bytes, minimum=1),
    )
    table.finish()
    return config


__all__ = ["RESPONSES_STATES", "ResponsesConfig", "ResponsesState", "parse_responses"]
