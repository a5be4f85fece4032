"""Kinds of input a deployment refused (an image, audio), learned, and the requests that carry them.

llama.cpp's server started without a vision (or audio) projector refuses any image with a 500 (read by
``gateway.relay.context.refused_input``). A refusal says something of the deployment, not only of that request: it
will refuse every later image alike. So the router remembers the kind, as it remembers a window learned from a
``context_length_exceeded``, and plans a request carrying that kind without the deployment; when no deployment of
the model is left, the client gets the 400 at once, saying it was learned, with no upstream call. What a request
carries is read from its body only once some deployment has refused something (``inputs_of``): until then no body
is scanned. A reload that changes where a deployment is served forgets what was learned of it
(``gateway.routing.health.RouterState.forget_changed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.config import DeploymentConfig
from gateway.errors import InvalidRequest
from gateway.samples import Endpoint
from gateway.types import DeploymentKey

InputKind = Literal["image", "audio"]
NO_INPUTS: frozenset[InputKind] = frozenset()
_PARTS: dict[str, InputKind] = {
    "image_url": "image",  # chat
    "input_audio": "audio",  # chat
    "image": "image",  # Messages
    "input_image": "image",  # Responses
}
"""A content part's ``type``, in any client API, and the kind of input it is."""
_LISTS = {"chat": "messages", "messages": "messages", "responses": "input"}
"""Where each API keeps the conversation whose parts are read."""


@dataclass
class RefusedInputs:
    """What each deployment refused, by (model, deployment): the kind and the refusal's words, for the error that
    answers a later request without asking it again."""

    refused: dict[DeploymentKey, dict[InputKind, str]] = field(default_factory=dict)

    def learn(self, key: DeploymentKey, kind: InputKind, words: str) -> bool:
        """Remember the refusal; True when it is news."""
        kinds = self.refused.setdefault(key, {})
        known = kind in kinds
        kinds[kind] = words
        return not known

    def refusing(self, key: DeploymentKey, inputs: frozenset[InputKind]) -> tuple[InputKind, str] | None:
        """The kind among ``inputs`` that ``key`` refused, with its refusal's words; None when it refused none."""
        kinds = self.refused.get(key)
        if not kinds:
            return None
        return next(((kind, kinds[kind]) for kind in sorted(inputs) if kind in kinds), None)


def accepting(
    inputs: RefusedInputs, model: str, deployments: Sequence[DeploymentConfig], carried: frozenset[InputKind]
) -> Sequence[DeploymentConfig]:
    """The ``deployments`` that have not refused what the request carries.

    Raises ``InvalidRequest`` (400, ``<kind>_input_unsupported``) when every one of them has: the gateway knows the
    answer, and asking again would only cost a round trip.
    """
    if not carried or not inputs.refused:
        return deployments
    kept: list[DeploymentConfig] = []
    refusals: list[tuple[InputKind, str]] = []
    for deployment in deployments:
        refusal = inputs.refusing((model, deployment.name), carried)
        if refusal is None:
            kept.append(deployment)
        else:
            refusals.append(refusal)
    if kept or not refusals:
        return kept
    said = "; ".join(words for _, words in refusals)
    message = f"{said}; learned from an earlier request, so this one was not sent upstream"
    raise InvalidRequest(message, code=f"{refusals[0][0]}_input_unsupported")


def inputs_of(inputs: RefusedInputs, endpoint: Endpoint, body: dict[str, Any]) -> frozenset[InputKind]:
    """The kinds of input ``body`` carries, read only when some deployment has refused some kind (else none: there
    is nothing to route around, and the body is not scanned)."""
    if not inputs.refused:
        return NO_INPUTS
    where = _LISTS.get(endpoint)
    return frozenset(_kinds(body.get(where), set())) if where is not None else NO_INPUTS


def _kinds(value: object, found: set[InputKind]) -> Iterable[InputKind]:
    """Every kind of input among ``value``'s parts, at any depth (a tool result may hold an image)."""
    if isinstance(value, list):
        for item in value:
            _kinds(item, found)
    elif isinstance(value, dict):
        part = value.get("type")
        kind = _PARTS.get(part) if isinstance(part, str) else None
        if kind is not None:
            found.add(kind)
        for inner in (value.get("content"), value.get("output")):  # a Responses tool output may hold images
            if isinstance(inner, list):
                _kinds(inner, found)
    return found
