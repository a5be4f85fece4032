"""Every provider's client, and what a reload hands on from the previous config's clients.

A client learns things of its provider from its answers that no config states: the upstream model ids whose answers
carry thought signatures (Gemini's, which it wants back), the fields the gateway writes that it refuses, the tool
call ids it takes. A reload builds new clients; what the old ones learned is still true of every deployment the
reload left as it was (``carried_over``), as the router keeps what it learned of them
(``gateway.routing.health.RouterState.forget_changed``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import GatewayConfig
from gateway.upstream import UpstreamClient


class UpstreamPool:
    """Every provider's client, keyed by provider name. Owned by the app's lifespan."""

    def __init__(self, clients: Mapping[str, UpstreamClient]) -> None:
        self.clients = dict(clients)

    @classmethod
    def from_config(
        cls, config: GatewayConfig, keys: Mapping[str, str | None], previous: UpstreamPool | None = None
    ) -> UpstreamPool:
        """Every provider's client; on a reload, each carries on what ``previous``'s client of the same provider
        learned (``carried_over``)."""
        cap = config.limits.max_answer_bytes
        pool = cls({p.name: UpstreamClient(p, keys.get(p.name), cap) for p in config.providers})
        if previous is not None:
            for name, client in pool.clients.items():
                before = previous.clients.get(name)
                if before is not None:
                    carried_over(before, client)
        return pool

    def __getitem__(self, provider: str) -> UpstreamClient:
        return self.clients[provider]

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


def carried_over(before: UpstreamClient, after: UpstreamClient) -> bool:
    """Hand what ``before`` learned of its provider (``thought_signers``, ``refused_fields``, ``short_tool_ids``) to
    ``after``, its successor across a reload, if the reload left the provider served at the same URLs: a deployment
    there that kept its upstream model id is the same model, and still wants what it wanted. A provider moved
    elsewhere (another server, perhaps another vendor) is learned afresh, as a deployment given another upstream
    model id is (it was never learned). The sets are shared, not copied: the previous config's requests still
    running teach the successor too. True when handed on."""
    old, new = before.provider, after.provider
    if (old.base_url, old.base_urls) != (new.base_url, new.base_urls):
        return False
    after.thought_signers = before.thought_signers
    after.refused_fields = before.refused_fields
    after.short_tool_ids = before.short_tool_ids
    return True
