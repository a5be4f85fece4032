"""Options the two OpenAI APIs share that the Messages API has no field for: carried between chat and Responses.

- ``verbosity`` (chat) and ``text.verbosity`` (Responses): how long an answer the model writes (``low``, ``medium``,
  ``high``), the same ask under two names. The Messages API has none: toward it the ask is left out (approx.: the
  model writes at its own length), as Codex sends one on every request.
- ``prompt_cache_retention`` (both, the same values): how long the provider keeps the prompt's cache, a cost hint
  with no effect on the answer; left out toward Messages, as ``prompt_cache_key`` is (Anthropic caches what
  ``cache_control`` marks, for as long as the mark says).

They are taken from the client's body before its API's reader (which knows nothing of them) and written into the
target's after its writer, as ``service_tier`` is (``gateway.translate.tiers``).
"""

from __future__ import annotations

from typing import Any

from gateway.translate.common import opt_str
from gateway.translate.ir import Api, Conversation


def take(api: Api, body: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    """``body`` without the shared options (a copy when they were in it), its verbosity and its cache retention."""
    if api == "messages":
        return body, None, None
    retention = opt_str(body.get("prompt_cache_retention"), "prompt_cache_retention")
    if api == "chat":
        verbosity = opt_str(body.get("verbosity"), "verbosity")
        rest = {k: v for k, v in body.items() if k not in ("verbosity", "prompt_cache_retention")}
        return rest, verbosity, retention
    text = body.get("text")
    verbosity = opt_str(text.get("verbosity"), "text.verbosity") if isinstance(text, dict) else None
    rest = {k: v for k, v in body.items() if k != "prompt_cache_retention"}
    return rest, verbosity, retention


def write(api: Api, conversation: Conversation, body: dict[str, Any]) -> None:
    """Put the conversation's shared options into ``body``, the target's request, where its API has them."""
    if api == "messages":
        return
    if conversation.prompt_cache_retention is not None:
        body["prompt_cache_retention"] = conversation.prompt_cache_retention
    if conversation.verbosity is None:
        return
    if api == "chat":
        body["verbosity"] = conversation.verbosity
    else:
        text = body.get("text")
        body["text"] = {**(text if isinstance(text, dict) else {}), "verbosity": conversation.verbosity}


__all__ = ["take", "write"]
