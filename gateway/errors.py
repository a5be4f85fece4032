"""The gateway's error tree, and the one table that maps it to HTTP statuses.

Every error a client can see is a ``GatewayError``; anything else is a bug and becomes a
generic 500 with a request id (see ``api.py``). Errors are translated to the most specific
class at the boundary where they happen (``raise ... from exc``)::

    GatewayError
    ├── ClientError                   4xx: the request is at fault
    │   ├── InvalidRequest            400 (bad JSON, wrong types, bad overrides)
    │   ├── AuthenticationFailed      401
    │   ├── PermissionDenied          403
    │   ├── ModelNotFound             404
    │   ├── RequestTimeout            408 (a request's head or body arrived too slowly)
    │   ├── PayloadTooLarge           413
    │   ├── UnsupportedEncoding       415 (a request body compressed in a coding the gateway cannot read)
    │   ├── HeadersTooLarge           431
    │   └── RateLimited               429 (the gateway's own limits)
    ├── UpstreamError                 an attempt at a provider failed
    │   ├── UpstreamTimeout           504 (connect, first token, idle gap, total; a provider's 504 or 408)
    │   │   └── DeadlinePassed        504 (the request's total deadline, while reading the provider's answer)
    │   ├── UpstreamUnavailable       502 (connection refused or reset, broken stream)
    │   └── UpstreamStatusError       the provider's own status, passed through
    ├── NoCapacity                    503 (every deployment is open-circuited or full)
    └── BudgetUnavailable             503 (a budget cannot be checked: its store is unreachable)

The rendered body is always OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
from typing import Any

ECHO_LIMIT = 256
"""Longest client value an error message repeats (a 50 KB model name comes back clipped, not whole)."""
MESSAGE_LIMIT = 4096
"""Longest error message sent: the last guard against an echo that was not clipped where it was made."""


def clip(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` as text for an error message, cut to ``limit`` characters with the full length said."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


class GatewayError(Exception):
    """Base of every error that reaches a client with a deliberate status and message."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = clip(message, MESSAGE_LIMIT)
        super().__init__(message)
        self.message = message
        self.param = clip(param) if param is not None else None
        if code is not None:
            self.code = code
        self.headers: dict[str, str] = dict(headers or {})

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict()).encode()


class ClientError(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"


class InvalidRequest(ClientError):
    status_code = 400
    code = "invalid_request"


class AuthenticationFailed(ClientError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(ClientError):
    status_code = 403
    error_type = "permission_error"
    code = "permission_denied"


class ModelNotFound(ClientError):
    status_code = 404
    code = "model_not_found"


class NotFound(ClientError):
    status_code = 404
    code = "not_found"


class MethodNotAllowed(ClientError):
    status_code = 405
    code = "method_not_allowed"


class RequestTimeout(ClientError):
    status_code = 408
    code = "request_timeout"


class PayloadTooLarge(ClientError):
    status_code = 413
    code = "request_too_large"


class UnsupportedEncoding(ClientError):
    status_code = 415
    code = "unsupported_content_encoding"


class HeadersTooLarge(ClientError):
    status_code = 431
    code = "request_headers_too_large"


class RateLimited(ClientError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"


class UpstreamError(GatewayError):
    """One attempt at one provider failed. ``provider`` names it; the message never holds a key.

    ``cooldown_s``: how long the router keeps the deployment out after this failure, when the provider
    said nothing (no ``Retry-After``); the client's ``Retry-After`` is made from it."""

    status_code = 502
    error_type = "upstream_error"
    code = "upstream_error"
    cooldown_s: float | None = None

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, code=code, headers=headers)
        self.provider = provider
        self.upstream_status = status
        self.retry_after_s = retry_after_s
        self.body = body


class UpstreamTimeout(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class DeadlinePassed(UpstreamTimeout):
    """The request's total deadline (``total_timeout_s``, or the client's shorter ``x-request-timeout``) came while
    the provider's answer was being read: not a silence past the idle timeout. Whether that holds against the
    provider is the relay's call: mid-stream it does not, if the provider was still sending
    (``gateway.relay.ending``)."""


class UpstreamUnavailable(UpstreamError):
    status_code = 502
    code = "upstream_unavailable"


class UpstreamStatusError(UpstreamError):
    """The provider answered with an error status; ``status_code`` is that status."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int = 502,
        code: str | None = None,
        retry_after_s: float | None = None,
        body: bytes | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status=status, code=code, retry_after_s=retry_after_s, body=body)
        self.status_code = status


class NoCapacity(GatewayError):
    status_code = 503
    error_type = "server_error"
    code = "no_capacity"


class BudgetExceeded(ClientError):
    """402, not 429: a spent budget comes back at its reset time, not in a few seconds, and the
    OpenAI SDKs retry 429s on their own (they do not retry 402, OpenRouter's status for the same).
    ``details`` (limit, spent, reserved, requested, reset time) join the error object."""

    status_code = 402
    error_type = "insufficient_quota"
    code = "budget_exceeded"

    def __init__(self, message: str, details: dict[str, Any], *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message, headers=headers)
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        body["error"].update(self.details)
        return body


class BudgetUnavailable(GatewayError):
    status_code = 503
    error_type = "server_error"
    code = "budget_unavailable"


def internal_error(request_id: str) -> GatewayError:
    """The generic 500 for a bug: nothing of the exception reaches the client, only an id to grep logs for."""
    return GatewayError(f"internal error (request id {request_id})", code="internal_error")


# -- Reading a provider's errors ----------------------------------------------------------------
# The one reader of upstream error bodies and error events, whatever their shape: the relay's
# attempt loop, the meter and the bench all take message and code from here.

MAX_ERROR_MESSAGE = 500


UNAVAILABLE_FOR_NOW = frozenset({503, 529})
"""Upstream statuses saying the provider cannot take the request for now (HTTP's 503, Anthropic's 529 "overloaded"):
load to back off from, and for the client a 503 (``NoCapacity``) whichever API it speaks, with the wait if known."""


TIMED_OUT = frozenset({408, 504})
"""Upstream statuses saying the request ran out of time on the provider's side (its gateway's 504, its server's 408):
a timeout (``UpstreamTimeout``, 504 to the client whichever API it speaks), not a broken provider, and one that asking
again may cure, as a 503's may."""


CREDENTIALS_REFUSED = frozenset({401, 403})
"""Upstream statuses refusing the gateway's own key to a provider (wrong, missing, or without access): the operator's
to fix, never the client's, whose key to the gateway was accepted."""


_REFUSING_CODES = {
    "invalid_api_key": 401,
    "authentication_error": 401,
    "unauthorized": 401,
    "unauthenticated": 401,
    "permission_error": 403,
    "permission_denied": 403,
    "401": 401,
    "403": 403,
}
"""An error object's ``code``, ``type`` or ``status`` (any case) that refuses the caller's key, with the status it
stands for: OpenAI's ``invalid_api_key`` (whose ``type`` is ``invalid_request_error``), Anthropic's
``authentication_error`` / ``permission_error`` types, Google's ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``, a
numeric ``code``."""


def refused_credentials(deployment: str, status: int, *, in_band: bool = False) -> str:
    """The words for a provider's ``CREDENTIALS_REFUSED`` answer: the deployment named, the provider's own words and
    code left out (they may quote the key's ends, as OpenAI's do, and ``invalid_api_key`` or Anthropic's
    ``authentication_error`` would tell a client, and its SDK, that *its* key is wrong). ``in_band``: the refusal
    came as an error inside a 200 (its body, or an event of its stream: ``credentials_refusal``)."""
    how = f"upstream answered 200 with a {status} error" if in_band else f"upstream returned {status}"
    return f"deployment '{deployment}': the provider refused the gateway's credentials ({how})"


def credentials_refusal(error: object) -> int | None:
    """The ``CREDENTIALS_REFUSED`` status that a provider's error object stands for, else None.

    Some providers answer a request made with a wrong key with 200 and an error body, or a stream whose first (or a
    later) event is an error: the same refusal as a 401 or 403, to be read as one (the client told nothing of the
    provider's code, the deployment's circuit opened). Read before a request fault is looked for: OpenAI's
    ``invalid_api_key`` has the ``invalid_request_error`` type."""
    if not isinstance(error, dict):
        return None
    for member in ("code", "type", "status"):
        value = error.get(member)
        if isinstance(value, str | int) and not isinstance(value, bool):
            status = _REFUSING_CODES.get(str(value).lower())
            if status is not None:
                return status
    return None


def describe_error(error: object) -> tuple[str, str | None]:
    """The message and code of an ``error`` member (an object with ``message``/``code``, or a bare string)."""
    if isinstance(error, dict):
        code = error.get("code")
        message = str(error.get("message") or error)[:MAX_ERROR_MESSAGE]
        return message, None if code is None else str(code)
    return str(error)[:MAX_ERROR_MESSAGE], None


def describe_error_body(body: bytes) -> tuple[str, str | None]:
    """The message and code of an error response's body: JSON with an ``error`` member, other JSON, or text."""
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return (text[:MAX_ERROR_MESSAGE] or "no error message"), None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict | str):
        return describe_error(error)
    if isinstance(data, dict) and data.get("object") == "error" and data.get("message"):
        return describe_error(data)  # vLLM's error body: {"object": "error", "message", "type", "code"}
    return str(data)[:MAX_ERROR_MESSAGE], None


def error_envelope(body: bytes) -> Any:
    """The error object of a body that is nothing but an error, else None.

    The shapes an error response's body takes: OpenAI's ``{"error": {…}}`` (or a bare string), Anthropic's
    ``{"type": "error", "error": {…}}``, vLLM's ``{"object": "error", "message": …}``. An answer that merely has an
    ``error`` member (a Responses object's ``"error": null``, or its failure) is an answer, not an envelope: None.
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if data.get("type") == "error" or data.get("object") == "error":
        return error if isinstance(error, dict) else data
    if "type" not in data and "object" not in data and isinstance(error, dict | str) and error:
        return error
    return None
