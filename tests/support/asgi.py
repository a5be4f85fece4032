"""One request through an ASGI endpoint in process: its body handed over once, every message it sends kept.

The client side of the in-memory tests that pin what a request sends (``test_request_output``, ``test_chunk_relay``):
no sockets, so what they compare is the app's own messages. The client hangs up only after the response's last body
message, as a client that read to the end does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

Endpoint = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def exchange(
    endpoint: Endpoint, scope: dict[str, Any], body: bytes, extra_headers: Sequence[tuple[bytes, bytes]] = ()
) -> list[dict[str, Any]]:
    """The messages ``endpoint`` sends for one JSON ``body`` (``scope``'s headers replaced by the body's own, then
    ``extra_headers``)."""
    scope = dict(scope)
    scope["headers"] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra_headers,
    ]
    done = asyncio.get_running_loop().create_future()
    messages: list[dict[str, Any]] = []
    body_read = False

    async def receive() -> dict[str, Any]:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False) and not done.done():
            done.set_result(None)

    await endpoint(scope, receive, send)
    return messages
