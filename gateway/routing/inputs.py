"""Kinds of input a deployment refused (an image, audio), learned, and the requests that carry them.

A refusal (llama.cpp without a vision projector answers an image with a 500: ``gateway.relay.context.refused_input``)
says something of the deployment: it will refuse later images alike. So the kind is remembered, as a learned window
is, and a request carrying it is planned without the deployment (with none left, a 400 at once and no upstream call).
A body is scanned for kinds only once some deployment has refused one (``inputs_of``). A reload that moves the
deployment forgets it (``RouterState.forget_changed``); ``gateway.routing.trials`` says how long it is believed.
See docs/routing.md ("Context windows").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.config import DeploymentConfig
from gateway.errors import InvalidRequest
from gateway.routing.trials import Trial
from gateway.samples import Endpoint
from gateway.types import DeploymentKey, InputKind

_PARTS: dict[str, InputKind] = {
    "image_url": "image",  # chat
    "input_audio": "audio",  # chat
    "image": "image",  # Messages
    "input_image": "image",  # Responses
}
"""A content part's ``type``, in any client API, and the kind of input it is."""
_LISTS = {"chat": "messages", "messages": "messages", "responses": "input"}
"""Where each API keeps the conversation whose parts are read."""


@dataclass(slots=True)
class Refusal:
    """One kind of input a deployment refused: the refusal's words, and when it was heard (or last tried again)."""

    words: str
    heard_at: float


@dataclass
class RefusedInputs:
    """What each deployment refused, by (model, deployment): the kind and the refusal's words, for the error that
    answers a later request without asking it again, and when, for how long it is believed
    (``gateway.routing.trials``)."""

    refused: dict[DeploymentKey, dict[InputKind, Refusal]] = field(default_factory=dict)

    def learn(self, key: DeploymentKey, kind: InputKind, words: str, now: float) -> bool:
        """Remember the refusal, heard ``now``; True when it is news."""
        kinds = self.refused.setdefault(key, {})
        known = kind in kinds
        kinds[kind] = Refusal(words, now)
        return not known

    def forget(self, key: DeploymentKey, kinds: frozenset[InputKind]) -> None:
        """The deployment took ``kinds`` after all (a trial's answer): it no longer refuses them."""
        known = self.refused.get(key)
        if known is None:
            return
        for kind in kinds:
            known.pop(kind, None)
        if not known:
            del self.refused[key]

    def refusing(
        self, key: DeploymentKey, inputs: frozenset[InputKind], now: float, believed_s: float
    ) -> tuple[InputKind, str] | frozenset[InputKind] | None:
        """The kind among ``inputs`` that ``key`` refused within ``believed_s``, with its refusal's words; else the
        kinds it refused longer ago (the deployment may be tried again for them); None when it refused none."""
        kinds = self.refused.get(key)
        if not kinds:
            return None
        stale: list[InputKind] = []
        for kind in sorted(inputs):
            refusal = kinds.get(kind)
            if refusal is None:
                continue
            if now - refusal.heard_at < believed_s:
                return kind, refusal.words
            stale.append(kind)
        return frozenset(stale) if stale else None


def accepting(
    inputs: RefusedInputs,
    model: str,
    deployments: Sequence[DeploymentConfig],
    carried: frozenset[InputKind],
    now: float,
    believed_s: float,
    trials: dict[str, Trial],
) -> Sequence[DeploymentConfig]:
    """The ``deployments`` that have not refused what the request carries, within ``believed_s``.

    A deployment whose refusal is older is kept, as a trial of it (``trials``, by deployment name), and its
    refusal is believed for ``believed_s`` more, so that the requests meanwhile are not all trials
    (``gateway.routing.trials``). Raises ``InvalidRequest`` (400, ``<kind>_input_unsupported``) when every one of
    them refused it lately: the gateway knows the answer, and asking again would only cost a round trip.
    """
    if not carried or not inputs.refused:
        return deployments
    kept: list[DeploymentConfig] = []
    refusals: list[tuple[InputKind, str]] = []
    for deployment in deployments:
        key = (model, deployment.name)
        refusal = inputs.refusing(key, carried, now, believed_s)
        if isinstance(refusal, tuple):
            refusals.append(refusal)
            continue
        if refusal is not None:
            for kind in refusal:
                inputs.refused[key][kind].heard_at = now
            trials[deployment.name] = Trial(kinds=refusal)
        kept.append(deployment)
    if kept or not refusals:
        return kept
    said = "; ".join(words for _, words in refusals)
    message = f"{said}; learned from an earlier request, so this one was not sent upstream"
    raise InvalidRequest(message, code=f"{refusals[0][0]}_input_unsupported")


def inputs_of(inputs: RefusedInputs, endpoint: Endpoint, body: dict[str, Any]) -> frozenset[InputKind]:
    """The kinds of input ``body`` carries, read only when some deployment has refused some kind (else none: there
    is nothing to route around, and the body is not scanned)."""
    if not inputs.refused:
        return frozenset()
    where = _LISTS.get(endpoint)
    return frozenset(_kinds(body.get(where), set())) if where is not None else frozenset()


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
