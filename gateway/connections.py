"""Slow, idle and surplus client connections, cut at the protocol before they cost a file descriptor for good.

uvicorn's httptools protocol waits forever for a request head that arrives one byte a second, for a
body that never ends, and for a connection that opens and says nothing; each one holds a socket, and
a few thousand exhaust the process's file descriptors. ``GuardedProtocol`` adds, per connection:

- a head size limit: bytes received before the head completes, 431 past ``[limits] max_header_bytes``
  (httptools buffers an unfinished header in full, so one endless header would grow the process);
- a header deadline: from the connection's first moment (or the first byte of a next request on a
  kept-alive one) the head must be complete within ``[server] header_timeout_s``, else the socket
  closes (with a 408 when some of a request had arrived);
- a body deadline: the whole body must have arrived ``[server] body_timeout_s`` after the head, else
  408 as the app answers its errors (OpenAI's shape, or Anthropic's with its retry hints on ``/v1/messages``;
  a request id) and the socket closes;
  a deadline for the whole body rather than per gap, so that a body trickled a byte at a time is cut too;
- a connection cap: past ``[server] max_connections`` open connections in this process, a new one is
  answered 503 and closed at once, so the descriptors in use stay bounded;
- a way to end a connection at once (``ABORT_EXTENSION`` in the request's scope), which the relay takes for a
  client that stopped reading, cut at the request's total deadline.

Idle kept-alive connections are uvicorn's own ``timeout_keep_alive`` (``[server] keepalive_timeout_s``).
The timers are the event loop's ``call_later`` handles: nothing runs while a connection behaves.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config import GatewayConfig
from gateway.error_responses import error_answer
from gateway.errors import GatewayError, HeadersTooLarge, NoCapacity, RequestTimeout
from gateway.relay.disconnect import ABORT_EXTENSION
from gateway.request_ids import new_request_id

_LINGER_NONE = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on, for 0 s: ``close`` sends a reset at once instead of first sending what the kernel holds."""
_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one client connection may take; ``0`` disables a deadline or the cap."""

    max_head_bytes: int = 32 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 10_000

    @classmethod
    def from_config(cls, config: GatewayConfig) -> ConnectionLimits:
        """``[limits] max_header_bytes`` and the ``[server]`` deadlines and cap."""
        server = config.server
        return cls(
            max_head_bytes=config.limits.max_header_bytes,
            header_timeout_s=server.header_timeout_s,
            body_timeout_s=server.body_timeout_s,
            max_connections=server.max_connections,
        )


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of ``ConnectionLimits`` (one instance per connection)."""

    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._begun = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self.limits.max_connections
        if cap and len(self.connections) > cap:
            self._refuse(
                NoCapacity(f"the gateway holds its limit of {cap} client connections", code="too_many_connections")
            )
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_timer is None:  # the first byte of a next request on a kept-alive connection
                self._arm_head_timer()
        super().data_received(data)
        if self._in_head and self._head_bytes > self.limits.max_head_bytes and not self.transport.is_closing():
            limit = self.limits.max_head_bytes
            if self.cycle is None or self.cycle.response_complete:
                self._refuse(HeadersTooLarge(f"request headers exceed the limit of {limit} bytes"))
            else:
                self.transport.close()

    def on_message_begin(self) -> None:
        # ``_head_bytes`` is not reset here: httptools calls this while parsing the very bytes just counted (a head
        # that came whole in one read, past the limit, would be forgotten); ``on_message_complete`` resets it.
        super().on_message_begin()
        self._in_head = True
        self._begun = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        self.scope["extensions"] = {**self.scope.get("extensions", {}), ABORT_EXTENSION: {"abort": self._abort}}
        super().on_headers_complete()
        if self.limits.body_timeout_s and not self.transport.is_closing():
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_overdue)

    def on_message_complete(self) -> None:
        self._cancel_body_timer()
        super().on_message_complete()
        self._in_head = True
        self._begun = False
        self._head_bytes = 0

    def _arm_head_timer(self) -> None:
        if self.limits.header_timeout_s:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_overdue)

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request's head, behind a response still being sent (a long stream): its
            # deadline starts once the connection is free, never cutting the response under way.
            self._arm_head_timer()
            return
        if not self._begun and self._head_bytes == 0:  # nothing of a request arrived: nobody to answer
            self.transport.close()
            return
        timeout = self.limits.header_timeout_s
        self._refuse(RequestTimeout(f"request headers did not arrive within {timeout:g} s"))

    def _body_overdue(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if self.transport.is_closing():
            return
        if cycle is not None and not cycle.response_started:
            timeout = self.limits.body_timeout_s
            path = str(cycle.scope.get("path", ""))
            error = RequestTimeout(f"request body did not arrive within {timeout:g} s", code="body_timeout")
            # The app waiting on this body sees the client gone, and whatever it sends next is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
            self._refuse(error, path)
            return
        self.transport.close()  # answered already (e.g. 401 before the body was read): just stop reading

    def _abort(self) -> None:
        """End the connection at once, its response unfinished (``ABORT_EXTENSION``: the relay cut a client that
        stopped reading). What the kernel still held for it is dropped with a reset, rather than kept for a client
        that may never read it; and the response is the client's hang-up, not an app that returned too soon."""
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:  # linger 0: the close resets the connection, the kernel's send queue dropped with it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NONE)
        self.transport.abort()

    def _refuse(self, error: GatewayError, path: str = "") -> None:
        """Answer ``error`` as the app would on ``path`` (``error_answer``: the API's shape, a request id, the Messages
        API's retry hints) and close the connection. Without ``path``: the request line's, if it arrived."""
        if not path:
            target = getattr(self, "url", b"") or b""  # httptools' on_url fills it as the request line arrives
            path = target.partition(b"?")[0].decode("latin-1")
        headers, body = error_answer(error, new_request_id(), path)
        head = [f"HTTP/1.1 {error.status_code} {_REASONS.get(error.status_code, 'Error')}".encode()]
        head += [name + b": " + value for name, value in headers if name.lower() != b"connection"]
        self.transport.write(b"\r\n".join([*head, b"connection: close", b"", b""]) + body)
        self.transport.close()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()


def guarded_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})
