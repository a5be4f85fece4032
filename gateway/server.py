"""Running the app under uvicorn: header-size limit at the protocol, graceful shutdown, clean exit.

Why a protocol subclass: uvicorn's httptools protocol (the fast one ``gateway serve`` uses) has
no limit on the size of a request head, and httptools buffers an unfinished header in full, so
a client could grow the process by streaming one endless header. ``_HeadLimitedProtocol``
counts the bytes received before the head is complete and answers 431 once they pass
``[limits] max_header_bytes``. (``h11_max_incomplete_event_size`` only applies to the h11
protocol.) The app's ``HeaderSizeLimit`` middleware checks again the head that did complete.

Shutdown: on SIGTERM (or Ctrl-C) uvicorn stops accepting, lets requests in flight, streams
included, run for up to ``[server] shutdown_grace_s``, then runs the lifespan's shutdown, which
flushes the stats store and closes every client. uvicorn then re-raises the signal so the
process would die of it; a stop we asked for is a success, so the process exits 0 instead.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config import GatewayConfig
from gateway.descriptors import raise_open_file_limit
from gateway.errors import HeadersTooLarge

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GC_THRESHOLDS = (20_000, 10, 10)
"""Allocations before a young collection, then young collections per middle one, middle per full (CPython's
own 10 and 10: a full pass also waits until a quarter more objects survived since the last, so its cost stays
in proportion to growth)."""


class _HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing request heads larger than ``max_head_bytes``."""

    max_head_bytes = 32 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self._refuse_head()

    def _refuse_head(self) -> None:
        if self.cycle is None or self.cycle.response_complete:
            error = HeadersTooLarge(f"request headers exceed the limit of {self.max_head_bytes} bytes")
            body = error.to_json()
            head = (
                f"HTTP/1.1 {error.status_code} Request Header Fields Too Large\r\n"
                "content-type: application/json\r\n"
                f"content-length: {len(body)}\r\n"
                "connection: close\r\n\r\n"
            )
            self.transport.write(head.encode("latin-1") + body)
        self.transport.close()


def header_limited_protocol(max_head_bytes: int) -> type[asyncio.Protocol]:
    """The httptools protocol class with the given head limit (uvicorn instantiates it per connection)."""
    return type("HeadLimitedProtocol", (_HeadLimitedProtocol,), {"max_head_bytes": max_head_bytes})


KEEPALIVE_S = 75
"""How long an idle client connection is kept open. Longer than the clients' own pool expiry (httpx, and so the
OpenAI SDK: 5 s; load balancers: 60 s), so that the server is never the side that closes a connection a client
is just reusing: with uvicorn's default, 5 s, both sides expire an idle connection at the same moment, and a request
sent into one the server is closing fails with no response (the likely cause of the routing benchmark's rare request
that failed with no attempt made)."""


def uvicorn_config(app: Any, config: GatewayConfig, host: str, port: int, log_level: str) -> uvicorn.Config:
    """How ``gateway serve`` runs ``app``; tests run the same configuration."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=header_limited_protocol(config.limits.max_header_bytes),
        lifespan="on",
        access_log=False,
        log_level=log_level,
        timeout_keep_alive=KEEPALIVE_S,
        # X-Forwarded-For is believed only from the proxies the config names (``[server] trusted_proxies``).
        proxy_headers=bool(config.server.trusted_proxies),
        forwarded_allow_ips=list(config.server.trusted_proxies),
        # uvicorn declares an int but only ever waits on it.
        timeout_graceful_shutdown=config.server.shutdown_grace_s,  # type: ignore[arg-type]
    )


def _stopped(signum: int, frame: FrameType | None) -> None:
    """Receives the signal uvicorn re-raises after its graceful shutdown: nothing left to do."""


def tune_garbage_collector() -> None:
    """Collect less often, and never scan what start-up built.

    With a thousand streams open, CPython's default thresholds ran full collections over every
    stream's objects often enough to add ~10 ms to the gateway's TTFT p99 and ~140 ms to its
    end-to-end p99 (benchmarks/overhead.py, spread step, c=1000); with these, +3 ms and +25 ms.
    Only the young collections are rarer: the older generations keep CPython's ratios. A cycle that
    outlives a young pass (one made while a request still runs) is then freed within ten more, not
    after the thousand middle passes a full one used to wait for, which let cycles live for minutes.
    """
    gc.collect()
    gc.freeze()  # modules, config, the tokenizer: alive for good, never worth scanning again
    gc.set_threshold(GC_THRESHOLDS[0], GC_THRESHOLDS[1], GC_THRESHOLDS[2])


def run(server: uvicorn.Server, sockets: list[socket.socket] | None = None) -> int:
    """Serve until stopped by a signal or a fatal error; 0 after a graceful stop. ``sockets``: already
    bound listening sockets (a worker's, inherited from its supervisor) instead of binding one."""
    previous = {sig: signal.signal(sig, _stopped) for sig in _STOP_SIGNALS}
    tune_garbage_collector()
    raise_open_file_limit()
    try:
        server.run(sockets=sockets)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1
