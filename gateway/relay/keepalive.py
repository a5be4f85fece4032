"""Keep-alives before a stream's first byte: a silent wait must not look like a dead connection.

A reasoning model can think for a minute before its first token, and the attempt loop may fall
back through several deployments before one answers; meanwhile the client has nothing, and load
balancers cut a connection idle for about 60 s. ``FirstByteKeepAlive`` runs beside the attempt loop
of a streamed request: once it has waited ``first_byte_keepalive_s`` it sends the 200 and the
client API's keep-alive (``Dialect.keep_alive``: an SSE comment, or Messages' ``event: ping``),
then one more per interval, until the loop hands back a reply. Usage::

    keeper = FirstByteKeepAlive(send, dialect, interval_s, headers)
    keeper.start()
    try:
        reply = await dispatcher.dispatch(request, plan)
    finally:
        if not keeper.stop_waiting():          # the usual case: no keep-alive was due, nothing to await
            await keeper.stop()
    await reply.send_to(keeper.send, ...)      # its own start is dropped if the keeper sent one

Once the 200 is out, the request can no longer fail with an error status: a loop that gives up, or
an upstream error relayed whole, ends the stream with an error event in the client API's shape
(``Dialect.stream_error``, as a stream that breaks mid-answer does). The response's headers are
then the keeper's: the request id and the affinity, but not which deployment answered (it was not
known yet). Created per request; not shared.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import Message, Send

from gateway.dialects import Dialect
from gateway.errors import describe_error_body
from gateway.relay.alarms import Alarm, alarm_at

SSE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


class FirstByteKeepAlive:
    """Sends a streamed request's 200 and keep-alives while its attempt loop has no reply yet."""

    def __init__(
        self,
        send: Send,
        dialect: Dialect,
        interval_s: float,
        headers: list[tuple[bytes, bytes]],
        *,
        request_id: str = "",
        model: str = "",
    ) -> None:
        self._send = send
        self.dialect = dialect
        self.request_id = request_id
        self.model = model
        self.interval_s = interval_s
        self.headers = headers
        self.started = False
        """Whether the 200 went out: from then on, errors are events in the stream."""
        self.sent = 0
        """Keep-alives sent."""
        self._timer: Alarm | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Arm the first keep-alive; ``loop``: the running loop, when the caller has it already (each
        ``asyncio.get_running_loop`` is a ``getpid`` system call in CPython 3.11)."""
        # A timer, not a task: most streams start well within the interval, and then cost only this (an alarm on the
        # loop's one timer: ``call_later``'s time and callback, no loop timer of its own).
        if loop is None:
            loop = asyncio.get_running_loop()
        self._timer = alarm_at(loop, loop.time() + self.interval_s, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._task = asyncio.ensure_future(self._run())

    def stop_waiting(self) -> bool:
        """Stop a keeper whose first keep-alive is not due yet (its timer cancelled), without a coroutine; False
        once keep-alives are being sent, which only ``stop``, awaited, ends."""
        if self._task is not None:
            return False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return True

    async def stop(self) -> None:
        """Stop sending keep-alives; returns once none is being written."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            if not self.started:
                # Marked before the await: uvicorn writes the start at once, and a stop that lands
                # during the await must not let the reply send a second one.
                self.started = True
                await self._send(
                    {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *self.headers]}
                )
            self.sent += 1
            await self._send({"type": "http.response.body", "body": self.dialect.keep_alive, "more_body": True})
            await asyncio.sleep(self.interval_s)

    @property
    def client_send(self) -> Send:
        """The client's own ``send``, for a reply once the keeper has stopped without sending anything."""
        return self._send

    async def send(self, message: Message) -> None:
        """The client's ``send`` for the reply: its ``http.response.start`` is dropped if the keeper sent one."""
        if self.started and message["type"] == "http.response.start":
            return
        await self._send(message)

    async def fail(self, message: str, code: str) -> None:
        """End the already-started stream with an error event in the client's API shape."""
        tail = self.dialect.failed_stream(message, code, self.request_id, self.model)
        await self._send({"type": "http.response.body", "body": tail, "more_body": False})

    async def fail_with_body(self, status: int, body: bytes) -> None:
        """End the stream with an upstream's whole error answer (a request fault relayed), as an event."""
        message, code = describe_error_body(body)
        await self.fail(f"upstream returned {status}: {message}", code or "upstream_error")


__all__ = ["SSE_HEADERS", "FirstByteKeepAlive"]
