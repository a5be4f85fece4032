"""The upstream request, built from the client's: the one seam where a body changes on its way out.

Relay, not translate: the body goes to a deployment that speaks the request's own API, untouched
but for ``model`` (the deployment's upstream id). The one addition is the usage chunk of chat and
completions streams: when the provider allows it (``stream_usage``, on by default) and the client
did not ask, the gateway asks for it (``stream_options.include_usage``), so that the answer's cost
is known; the forwarder then keeps that chunk from the client, which did not ask for it
(``gateway.relay.forward``).

Translating between APIs (a Messages request to a chat-only deployment) would be built here,
beside ``upstream_body``: the dialects already read every API's answers.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gateway.config import ProviderConfig
from gateway.relay.request import ProxyRequest
from gateway.routing import Candidate


def client_asked_usage(request: ProxyRequest) -> bool:
    options = request.body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def injects_usage(request: ProxyRequest, provider: ProviderConfig) -> bool:
    """Whether the gateway adds ``stream_options.include_usage`` to this request for this provider."""
    return (
        request.stream
        and request.endpoint in ("chat", "completions")
        and provider.stream_usage
        and not client_asked_usage(request)
    )


def upstream_body(request: ProxyRequest, candidate: Candidate) -> bytes:
    """The body sent to ``candidate``: the client's fields untouched but for ``model`` (and the usage ask)."""
    body = dict(request.body)
    body["model"] = candidate.deployment.model
    if injects_usage(request, candidate.provider):
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return encode_body(body)


def encode_body(body: dict[str, Any]) -> bytes:
    """Compact JSON, UTF-8: msgspec, a fraction of ``json.dumps``'s time, the same values.

    (Floats may be spelt differently, ``1e16`` for ``1e+16``: the same number.) A lone surrogate
    ("\\ud800" in the client's JSON) has no UTF-8 form: msgspec refuses it, and ``json`` keeps it
    escaped instead.
    """
    try:
        return msgspec.json.encode(body)
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()
