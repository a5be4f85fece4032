"""Which deployment created each response: where ``previous_response_id`` and ``/v1/responses/{id}`` must go.

The Responses API keeps state at the provider: a response's id means something only to the
deployment that created it. Each response the gateway relays is bound, when its attempt commits
(before the client can have read its id), to its (model, deployment) in the shared binding store
(``gateway.sessions.bindings``), for ``RESPONSE_TTL_S`` (30 days, as long as OpenAI stores responses).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.sessions.bindings import UNAVAILABLE, BindingStore, InMemoryBindingStore, Unavailable

NAMESPACE = "response"
RESPONSE_TTL_S = 30 * 86_400


@dataclass(frozen=True, slots=True)
class Owner:
    """The deployment that holds a response: its client-facing model and its deployment name."""

    model: str
    deployment: str


class ResponseOwners:
    """Response id → ``Owner``, over a ``BindingStore``. Usage::

    owners.remember("resp_1", Owner("m", "groq"))
    owner = await owners.owner("resp_1")     # Owner, None (unknown) or UNAVAILABLE (cannot tell now)
    """

    def __init__(self, store: BindingStore | None = None) -> None:
        self.store: BindingStore = store if store is not None else InMemoryBindingStore()

    def remember(self, response_id: str, owner: Owner) -> None:
        self.store.put(NAMESPACE, response_id, json.dumps([owner.model, owner.deployment]), RESPONSE_TTL_S)

    async def owner(self, response_id: str) -> Owner | None | Unavailable:
        value = await self.store.lookup(NAMESPACE, response_id)
        if value is None or isinstance(value, Unavailable):
            return value
        try:
            model, deployment = json.loads(value)
        except (ValueError, TypeError):
            return None  # not a value this gateway wrote
        return Owner(str(model), str(deployment))

    def forget(self, response_id: str) -> None:
        self.store.delete(NAMESPACE, response_id)


__all__ = ["NAMESPACE", "Owner", "RESPONSE_TTL_S", "ResponseOwners", "UNAVAILABLE"]
