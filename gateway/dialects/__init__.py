"""One dialect per API: how its streams are read and its errors written (see ``gateway.dialects.base``)."""

from __future__ import annotations

from gateway.dialects.base import Dialect, Look, Tally
from gateway.dialects.chat import ChatDialect
from gateway.dialects.messages import MessagesDialect
from gateway.dialects.responses import ResponsesDialect
from gateway.samples import Endpoint

CHAT = ChatDialect("chat")
_DIALECTS: dict[Endpoint, Dialect] = {
    "chat": CHAT,
    "completions": ChatDialect("completions"),
    "embeddings": ChatDialect("embeddings"),
    "responses": ResponsesDialect(),
    "messages": MessagesDialect(),
}


def dialect_for(api: Endpoint) -> Dialect:
    return _DIALECTS[api]


def dialect_for_path(path: str, anthropic_client: bool = False) -> Dialect:
    """The dialect of an HTTP path, for errors raised outside the inference endpoints (a 404, a 405, the model
    list's): Anthropic's for ``/v1/messages`` and for a client that sends ``anthropic-version``, else OpenAI's."""
    return _DIALECTS["messages"] if anthropic_client or path.startswith("/v1/messages") else CHAT


__all__ = ["CHAT", "Dialect", "Look", "Tally", "dialect_for", "dialect_for_path"]
