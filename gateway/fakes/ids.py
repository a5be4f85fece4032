"""The fake's tool-call ids: a new one for every answer, the same one for the same request.

Why: agents key a tool's result by its call's id (Claude Code's ``--continue`` rebuilds the
conversation by them; a Messages ``tool_result`` names its ``tool_use``, a chat ``tool`` message its
call). One constant id for every call made a conversation's second call look like its first, and the
agent mixed the results or looped. The id is a digest of the request body: every turn extends the
conversation, so each turn's call gets its own id; replaying the same request gives the same id (the
fake stays deterministic), and unlike a counter it does not repeat after the fake restarts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

DIGEST_CHARS = 24


def tool_call_id(body: dict[str, Any], prefix: str) -> str:
    """``prefix`` and a digest of ``body``: ``call_`` (chat, Responses) or ``toolu_`` (Messages), as each API's own."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    return prefix + hashlib.sha256(canonical).hexdigest()[:DIGEST_CHARS]


__all__ = ["tool_call_id"]
