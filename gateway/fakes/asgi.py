"""The small ASGI pieces every API of the fake provider shares: bodies, JSON, errors, disconnects."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.types import Receive, Send


class Disconnect:
    """Watches ``receive`` for the client hanging up, so a paced stream stops at once."""

    def __init__(self, receive: Receive) -> None:
        self.event = asyncio.Event()
        self.task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.event.set()
                return

    async def sleep(self, seconds: float) -> bool:
        """Sleep, or return True early if the client went away."""
        if seconds <= 0:
            return self.event.is_set()
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def sleep_briefly(self) -> bool:
        """Yield to the loop once (the watch may run); True if the client went away."""
        await asyncio.sleep(0)
        return self.event.is_set()

    def close(self) -> None:
        self.task.cancel()


class Drop(Exception):
    """Raised inside the app after the response started: uvicorn then closes the connection.

    ASGI has no way to say "close the connection now" but to fail after the response started.
    uvicorn logs any such failure as an error with a traceback; for this one, which the fake
    raises on purpose, ``QuietDrops`` keeps the log clean (a planned fault is not a crash).
    """


class QuietDrops(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" record when the exception is a planned ``Drop``."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, Drop)


def quiet_planned_drops() -> None:
    """Install ``QuietDrops`` on uvicorn's error log, once."""
    server_log = logging.getLogger("uvicorn.error")  # where uvicorn reports an app's exceptions
    if not any(isinstance(f, QuietDrops) for f in server_log.filters):
        server_log.addFilter(QuietDrops())


async def read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


async def send_json(send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(payload).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": start_headers + (headers or [])})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: Send,
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    error = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    await send_json(send, status, error, headers)


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def start_stream(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )


def sse(event: str | None, payload: Any) -> bytes:
    """One SSE event: ``event: <name>`` (when named) and its JSON ``data``."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"
