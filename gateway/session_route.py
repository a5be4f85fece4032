"""The conversation an inference request continues, for routing: its session key, the affinity asked for
(the policy's, or ``x-gateway-affinity``), and the deployment bound to it in the session store."""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest
from gateway.policies import AFFINITIES, Affinity, PolicyConfig
from gateway.routing.plan import SessionRoute
from gateway.runtime import GatewayRuntime
from gateway.sessions.bindings import Unavailable
from gateway.sessions.identity import SessionId, session_of

AFFINITY_HEADER_NAME = "x-gateway-affinity"
"""Request: ``off`` (or ``strict``/``auto``) for this request; response: what routing did with its session."""
AFFINITY_HEADER = AFFINITY_HEADER_NAME.encode()


def session_identity(
    headers: list[tuple[str, str]], body: dict[str, Any], size: int, model: str, scope_id: str, policy: PolicyConfig
) -> SessionId | None:
    """The conversation this request continues, if any (``session_of`` with the policy's header names and threshold):
    ``headers``, the request's, decoded (``gateway.upstream.decoded_headers``); ``policy``, the model's, as the caller
    found it. ``session_route`` then reads its binding; a request that continues no session awaits nothing."""
    return session_of(
        headers,
        body,
        model=model,
        scope=scope_id,
        body_bytes=size,
        header_names=policy.session_headers,
        min_cacheable_tokens=policy.session_min_tokens,
    )


async def session_route(
    runtime: GatewayRuntime, headers: list[tuple[str, str]], identity: SessionId, policy: PolicyConfig
) -> SessionRoute:
    """The route of the session ``identity``: the affinity asked for (``x-gateway-affinity: off``, ``strict`` or
    ``auto`` overrides the policy's for this request), and its binding if the store reads it within its deadline."""
    affinity: Affinity = policy.affinity
    asked = next((v.strip().lower() for k, v in headers if k == AFFINITY_HEADER_NAME), None)
    if asked is not None:
        if asked not in AFFINITIES:
            raise InvalidRequest(
                f"header '{AFFINITY_HEADER_NAME}' must be one of {', '.join(AFFINITIES)}, got '{asked[:40]}'",
                param=AFFINITY_HEADER_NAME,
            )
        affinity = asked  # narrowed by the check above
    if affinity == "off":
        return SessionRoute(identity.key, identity.source, "off")
    found = await runtime.sessions.lookup(identity.key)
    if isinstance(found, Unavailable):
        return SessionRoute(identity.key, identity.source, affinity, "unavailable")
    if found is None:
        return SessionRoute(identity.key, identity.source, affinity, "unbound")
    return SessionRoute(identity.key, identity.source, affinity, "bound", found.deployment, found.prompt_tokens)
