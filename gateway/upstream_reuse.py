"""Which pooled upstream connections were reused, and which of their failures mean the request was never read.

A provider closes a kept-alive connection when it has been idle for its keep-alive time; a request the
gateway sends on it just then fails before any byte of an answer, and the provider never read it. Such a
failure on a *reused* connection is sent again (``gateway.upstream``, at most ``STALE_RESENDS`` times); a
fresh connection's failure is the provider's answer. Kept apart from ``gateway.upstream`` for its size: it is
the rest of the one place aiohttp is known.
"""

from __future__ import annotations

import contextvars
import errno
import weakref
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

REUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("gateway_upstream_reused", default=False)
"""Whether the connection the current task's last upstream request went out on had served one before."""

STALE_RESENDS = 2
"""How many times one request is sent again after a reused connection failed before any answer byte."""


class ReuseMarkingConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that tells its caller whether the connection it handed out was reused from the pool.

    aiohttp says so only through a ``TraceConfig`` (``on_connection_reuseconn``), which costs every request
    its whole trace machinery; here the connection's protocol is remembered once it has been handed out, and
    the answer goes to ``REUSED`` (the connect runs in the requesting task, so the caller reads it there).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handed_out: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        if protocol is not None:
            reused = protocol in self._handed_out
            if not reused:
                self._handed_out.add(protocol)
            REUSED.set(reused)
        return connection


def never_read(exc: aiohttp.ClientError) -> bool:
    """A failure that says the provider closed or reset the connection before any byte of an answer."""
    if isinstance(exc, aiohttp.ServerDisconnectedError) or unwritten(exc):
        return True
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False  # no connection was made: not a pooled connection's failure
    return isinstance(exc, ConnectionResetError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNRESET)


def unwritten(exc: BaseException) -> bool:
    """aiohttp could not write the request: its writer found the connection already closing or lost.

    aiohttp's writer refuses to hand bytes to a closing transport with its own ``ClientConnectionResetError``
    ("Cannot write to closing transport", or "Connection lost" from a drain); the request's body task re-raises
    that as a ``ClientOSError`` with *no* errno ("Can not write request body"), the writer's error as its cause,
    and that is what the request raises. On uvloop (the server's loop) this is how a kept-alive connection the
    provider closed (FIN) or reset (RST) after the pool handed it out, but before the body task ran, fails.
    The request never reached the provider whole, so it cannot have been acted on; and aiohttp hands over a
    response head it has parsed before any error it holds, so no answer had begun either.
    """
    return isinstance(exc, aiohttp.ClientOSError) and isinstance(exc.__cause__, aiohttp.ClientConnectionResetError)
