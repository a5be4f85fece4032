"""Which deployment holds each session's prompt in cache: session key → (deployment, prompt size), with an idle TTL.

A session's binding is written when one of its answers completes (``AttemptRunner.record``), never
mid-stream: an answer that failed or was cut short may have left nothing cached. Each answer
rewrites it, so it expires ``session_ttl_s`` after the conversation's last turn, as a provider's
cache does. It lives in the shared binding store (``gateway.sessions.bindings``): in Redis under
``{<prefix>:bind:session:<key>}`` when the stats are there, so every replica routes a session's next
turn alike; the request path reads the local cache, and Redis only on a local miss within the
store's lookup deadline (``LOOKUP_TIMEOUT_S``). The key is a digest scoped to the client key and
the model (``gateway.sessions.identity``); the value names the deployment and the prompt's size, which is
what the next turn expects to find cached there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.sessions.bindings import BindingStore, InMemoryBindingStore, Unavailable

NAMESPACE = "session"


@dataclass(frozen=True, slots=True)
class SessionBinding:
    deployment: str
    prompt_tokens: int


class SessionBindings:
    """Session key → ``SessionBinding`` over a ``BindingStore``. Usage::

    sessions.bind("3f2a...", "groq", prompt_tokens=31_000, ttl_s=300)
    found = await sessions.lookup("3f2a...")   # SessionBinding, None, or UNAVAILABLE (cannot tell now)
    """

    def __init__(self, store: BindingStore | None = None) -> None:
        self.store: BindingStore = store if store is not None else InMemoryBindingStore()

    def bind(self, key: str, deployment: str, prompt_tokens: int, ttl_s: float) -> None:
        self.store.put(NAMESPACE, key, json.dumps([deployment, int(prompt_tokens)]), ttl_s)

    async def lookup(self, key: str) -> SessionBinding | None | Unavailable:
        value = await self.store.lookup(NAMESPACE, key)
        if value is None or isinstance(value, Unavailable):
            return value
        try:
            deployment, prompt_tokens = json.loads(value)
            return SessionBinding(str(deployment), int(prompt_tokens))
        except (ValueError, TypeError):
            return None  # not a value this gateway wrote
