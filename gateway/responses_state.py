"""Where a Responses request's state is, before routing and after the answer.

A request naming ``previous_response_id`` continues either a conversation the gateway keeps
(``kept_conversation``: it is expanded, and any deployment may serve it) or a response a deployment
keeps (``previous_owner``: the request is pinned to that deployment). After the answer,
``capture_for`` says whether the gateway keeps it (``gateway.conversation_flow``).
"""

from __future__ import annotations

from starlette.types import Send

from gateway.config import ModelConfig, serving
from gateway.conversation_flow import ResponseCapture, gateway_keeps, wants_storing
from gateway.conversations import StoredResponse
from gateway.errors import InvalidRequest, ModelNotFound, NoCapacity
from gateway.relay import ProxyRequest
from gateway.relay.replies import Reply
from gateway.runtime import GatewayRuntime
from gateway.sessions.bindings import Unavailable


async def kept_conversation(
    runtime: GatewayRuntime, model: ModelConfig, previous: object, scope: str
) -> StoredResponse | None:
    """The conversation the gateway keeps under ``previous`` for this key's scope; None if it keeps none (then a
    native Responses deployment may hold it: with none, the error ``previous_owner`` gives is raised).

    With its store unreachable, a model whose native Responses deployments keep their own answers
    (``[responses] state = "provider"``) is asked as if the gateway kept none: the owner binding, which
    has its own fallbacks, decides. Elsewhere only the gateway could hold the conversation: 503.
    """
    if not isinstance(previous, str) or not previous:
        raise InvalidRequest("'previous_response_id' must be a non-empty string", param="previous_response_id")
    stored = await runtime.conversations.get(previous)
    if isinstance(stored, Unavailable):
        if runtime.config.responses.state == "provider" and serving(model, "responses"):
            return None
        raise NoCapacity(
            f"cannot read the conversation of response '{previous}' now: its store is unreachable",
            code="conversation_store_unavailable",
            headers={"retry-after": "1"},
        )
    if stored is not None and stored.scope == scope:
        return stored
    if not serving(model, "responses"):
        # No deployment of the model could hold it either: said now, before the deployments reached by
        # translation all refuse ``previous_response_id`` as a field they cannot carry.
        await previous_owner(runtime, model, previous)
    return None


async def previous_owner(runtime: GatewayRuntime, model: ModelConfig, previous: object) -> str:
    """The deployment that must serve a Responses call continuing ``previous`` (its ``previous_response_id``)."""
    if not isinstance(previous, str) or not previous:
        raise InvalidRequest("'previous_response_id' must be a non-empty string", param="previous_response_id")
    responders = serving(model, "responses")
    owner = await runtime.owners.owner(previous)
    if isinstance(owner, Unavailable):
        if len(responders) == 1:
            return responders[0].name  # only one place it can be
        health = runtime.bindings.health()
        raise NoCapacity(
            f"cannot tell which deployment holds response '{previous}' now: the binding store is unreachable"
            + (f" ({health.reason})" if health.reason else ""),
            code="binding_store_unavailable",
            headers={"retry-after": "1"},
        )
    if owner is None:
        if len(responders) == 1:
            return responders[0].name  # the one deployment decides whether it knows the id
        raise ModelNotFound(
            f"previous response '{previous}' is unknown to this gateway (not created through it, not stored: "
            "sent with 'store: false' or cut before its end, or expired), so no deployment of model "
            f"'{model.name}' can be chosen to continue it",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if owner.model != model.name or all(d.name != owner.deployment for d in responders):
        raise InvalidRequest(
            f"previous response '{previous}' was created by deployment '{owner.deployment}' of model "
            f"'{owner.model}', which model '{model.name}' does not serve over the Responses API here; "
            f"continue it with model '{owner.model}'",
            param="previous_response_id",
            code="previous_response_elsewhere",
        )
    return owner.deployment


def capture_for(runtime: GatewayRuntime, request: ProxyRequest, reply: Reply, send: Send) -> ResponseCapture | None:
    """A Responses answer the gateway keeps (``gateway.conversation_flow``) is watched on its way to the client."""
    winner = reply.log.winner
    if request.endpoint != "responses" or winner is None or not wants_storing(request.body):
        return None
    return ResponseCapture(send) if gateway_keeps(runtime.config.responses, winner.deployment) else None


__all__ = ["capture_for", "kept_conversation", "previous_owner"]
