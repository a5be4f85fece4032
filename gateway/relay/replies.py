"""Committed answers, written to the client: a whole JSON body, or a stream relayed as it comes.

A stream is committed to the client when its first output-bearing chunk arrives; from then
on, bytes go to the client as they come, each chunk flushed at once and never re-serialised,
while a ``StreamMeter`` watches them on the side. If the upstream breaks after that, the
client's stream ends with an OpenAI-shaped error event, never as if the answer were complete.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.relay.attempt import Attempt, AttemptLog
from gateway.relay.disconnect import DisconnectWatch
from gateway.relay.request import ProxyRequest
from gateway.samples import Outcome

if TYPE_CHECKING:
    from gateway.relay.dispatch import Dispatcher

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


class Reply:
    """A committed answer, ready to be written to the client."""

    log: AttemptLog

    def headers(self) -> list[tuple[bytes, bytes]]:
        winner = self.log.winner
        headers = [
            (b"x-gateway-attempts", str(self.log.attempts).encode()),
            (b"x-gateway-route", self.log.route.encode()),
        ]
        if winner is not None:
            headers.append((b"x-gateway-provider", winner.provider.name.encode()))
            headers.append((b"x-gateway-deployment", winner.deployment.name.encode()))
        return headers

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        raise NotImplementedError


class FullReply(Reply):
    """A whole JSON body: a non-streamed answer, or an upstream client-fault error relayed as is."""

    def __init__(
        self, status: int, body: bytes, content_type: str, log: AttemptLog, finish: Callable[[], None] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.log = log
        self._finish = finish

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        headers = [
            (b"content-type", self.content_type.encode("latin-1")),
            (b"content-length", str(len(self.body)).encode()),
            *self.headers(),
            *extra_headers,
        ]
        watch.disarm()
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            await send({"type": "http.response.body", "body": self.body})
        finally:
            # The upstream answered in full: its sample is due even if the client is gone.
            if self._finish is not None:
                self._finish()


class StreamReply(Reply):
    """A stream committed to one attempt: held chunks first, then the rest as it arrives."""

    def __init__(self, dispatcher: Dispatcher, request: ProxyRequest, attempt: Attempt, log: AttemptLog) -> None:
        self.dispatcher = dispatcher
        self.request = request
        self.attempt = attempt
        self.log = log

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        attempt = self.attempt
        response, meter = attempt.response, attempt.meter
        assert response is not None and meter is not None
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.headers(),
            *extra_headers,
        ]
        broken: UpstreamError | None = None
        outcome: Outcome = "ok"
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"".join(attempt.held), "more_body": True})
            attempt.held.clear()
            while not meter.done:
                chunk = await response.read_chunk()
                if not chunk:
                    meter.end_of_stream()
                    break
                meter.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamError as exc:
            broken = exc
        except asyncio.CancelledError:
            outcome = "client_cancelled"
            raise
        finally:
            response.aclose()
            if outcome == "client_cancelled":
                reading = meter.finish(self.dispatcher.counter)
                self.dispatcher.record(self.request, attempt, outcome, reading)
        watch.disarm()
        reading = meter.finish(self.dispatcher.counter)
        tail = b""
        if broken is not None and reading.finished and reading.error_message is None:
            # The answer was complete (finish_reason came); only the provider's [DONE] or its
            # close went missing: end the client's stream cleanly rather than as an error.
            tail = b"data: [DONE]\n\n"
        elif broken is not None:
            outcome = "timeout" if isinstance(broken, UpstreamTimeout) else "broken_stream"
            tail = error_event(broken.message, "upstream_stream_broken")
        elif reading.error_message is not None:
            # The provider's own error event has told the client already.
            outcome = "upstream_error"
        elif not meter.done and not reading.finished:
            outcome = "broken_stream"
            name = attempt.candidate.provider.name
            tail = error_event(
                f"{name}: upstream stream ended before the answer was complete", "upstream_stream_broken"
            )
        else:
            if not meter.done:
                # The answer is complete but the provider forgot [DONE]: end the stream cleanly.
                tail = b"data: [DONE]\n\n"
            if reading.malformed:
                # Relayed as is, but the client's SDK choked on it: not a success.
                outcome = "upstream_error"
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        self.dispatcher.record(self.request, attempt, outcome, reading)


def error_event(message: str, code: str) -> bytes:
    """An OpenAI-shaped error as one SSE event: how a stream that cannot be completed ends."""
    error = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + json.dumps(error).encode() + b"\n\n"
