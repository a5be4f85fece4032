"""What Anthropic's clients read on an error besides its body: ``x-should-retry`` and ``request-id``.

Anthropic's SDKs (and Claude Code on top of them) decide whether to re-send a failed request from
the ``x-should-retry`` header first, then from the status. Anthropic sends it on every error, with
a ``request-id``; a gateway that sends neither leaves the client guessing, and Claude Code guessed
"retry" on a wrong key. Every response with an error status on ``/v1/messages`` (and below it,
``count_tokens``) therefore gets both, whichever layer produced it: the endpoint's own errors, a
provider's 4xx relayed as is, Starlette's 404/405, the header-size limit. An error that already
names its own ``x-should-retry`` (``GatewayError.headers``) keeps it. An answer written below the app, by the
connection guard (a body that stopped arriving, a head too large), gets them from ``hinted_headers``.

Whether a retry can help is read from the status: 408, 409, 429 and 5xx may pass on a second try
(a slot frees, a provider recovers); every other 4xx (bad request, wrong key, unknown model,
budget spent, body too large) fails the same way again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from starlette.types import Message, Send

RETRYABLE_STATUSES = frozenset({408, 409, 429})
MESSAGES_PREFIX = "/v1/messages"


def should_retry(status: int) -> bool:
    """Whether the same request, sent again, may succeed: 408, 409, 429 and every 5xx."""
    return status in RETRYABLE_STATUSES or status >= 500


def with_retry_hints(send: Send) -> Send:
    """``send``, with ``x-should-retry`` and ``request-id`` added to an error response's start."""

    async def hinted(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            message = {**message, "headers": hinted_headers(message["status"], message.get("headers", ()))}
        await send(message)

    return hinted


def hinted_headers(status: int, headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An error response's ``headers`` with ``x-should-retry`` and ``request-id`` added where they are missing
    (``request-id`` repeats ``x-request-id`` when there is one): for answers written without ``with_retry_hints``'s
    ``send``, as the connection guard's (``gateway.connections``)."""
    headers = list(headers)
    names = {name.lower() for name, _ in headers}
    if b"x-should-retry" not in names:
        headers.append((b"x-should-retry", b"true" if should_retry(status) else b"false"))
    if b"request-id" not in names:
        known = next((v for n, v in headers if n.lower() == b"x-request-id"), None)
        headers.append((b"request-id", known or f"req_{uuid.uuid4().hex}".encode()))
    return headers


def wants_retry_hints(path: str) -> bool:
    """The Messages API's paths, whose clients read the hints."""
    return path.startswith(MESSAGES_PREFIX)


__all__ = ["hinted_headers", "should_retry", "wants_retry_hints", "with_retry_hints"]
