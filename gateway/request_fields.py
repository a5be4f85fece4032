"""Where each client API keeps the request fields the gateway reads: one table, for every check that names them.

The APIs name the same things differently: the conversation is chat's and Messages' ``messages`` but the
Responses API's ``input``; the output cap is ``max_tokens`` (chat also ``max_completion_tokens``) but the
Responses API's ``max_output_tokens``. A check written against one API's names (chat's) lets the others'
requests past it, or blames a field the client never sent; reading the names from here keeps every API under
the same limits, and every error's ``param`` the client's own.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.samples import Endpoint


class InputField(NamedTuple):
    """The field holding a request's input, the types it may have (said as ``expected``), and whether it must be
    there (a Responses request may continue a stored conversation without new input)."""

    name: str
    kinds: tuple[type, ...]
    expected: str
    required: bool


INPUT_FIELDS: dict[Endpoint, InputField] = {
    "chat": InputField("messages", (list,), "an array of messages", True),
    "completions": InputField("prompt", (str, list), "a string or an array", True),
    "embeddings": InputField("input", (str, list), "a string or an array", True),
    "responses": InputField("input", (str, list), "a string or an array of input items", False),
    "messages": InputField("messages", (list,), "an array of messages", True),
}
MAX_TOKEN_FIELDS: dict[Endpoint, tuple[str, ...]] = {
    "chat": ("max_completion_tokens", "max_tokens"),
    "completions": ("max_tokens",),
    "embeddings": (),
    "responses": ("max_output_tokens",),
    "messages": ("max_tokens",),
}
"""The fields capping a request's output, the one a client means first (chat's newer name before its older)."""
CONVERSATION_FIELDS: dict[Endpoint, tuple[str, str]] = {
    "chat": ("messages", "messages"),
    "responses": ("input", "input items"),
    "messages": ("messages", "messages"),
}
"""The field holding a conversation's turns (what ``[limits] max_messages`` counts), with what its entries are
called. A completions prompt or an embeddings input that is a list is a batch of separate inputs, not a
conversation: not counted."""


def token_field(endpoint: Endpoint, body: dict[str, object]) -> str:
    """The output-cap field ``body`` sets (the first of its API's, in ``MAX_TOKEN_FIELDS`` order), to name in an
    error about it; ``max_tokens`` when it sets none."""
    return next((name for name in MAX_TOKEN_FIELDS[endpoint] if name in body), "max_tokens")
