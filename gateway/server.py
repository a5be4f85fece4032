"""Running the app under uvicorn: connection limits at the protocol, graceful shutdown, clean exit.

Why a protocol subclass: uvicorn's httptools protocol (the fast one ``gateway serve`` uses) has
no limit on the size of a request head, no deadline for a head or a body, and no cap on open
connections; ``gateway.connections.GuardedProtocol`` adds them, from ``[limits] max_header_bytes``
and ``[server] header_timeout_s``, ``body_timeout_s``, ``max_connections``. The app's
``HeaderSizeLimit`` middleware checks again the head that did complete.

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

from gateway.config import GatewayConfig
from gateway.connections import ConnectionLimits, guarded_protocol
from gateway.descriptors import raise_open_file_limit

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GC_THRESHOLDS = (20_000, 10, 10)
"""Allocations before a young collection, then young collections per middle one, middle per full (CPython's
own 10 and 10: a full pass also waits until a quarter more objects survived since the last, so its cost stays
in proportion to growth)."""


def header_limited_protocol(max_head_bytes: int) -> type[asyncio.Protocol]:
    """The guarded protocol with the given head limit and the default deadlines (tests of the head limit)."""
    return guarded_protocol(ConnectionLimits(max_head_bytes=max_head_bytes))


def uvicorn_config(app: Any, config: GatewayConfig, host: str, port: int, log_level: str) -> uvicorn.Config:
    """How ``gateway serve`` runs ``app``; tests run the same configuration."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=guarded_protocol(ConnectionLimits.from_config(config)),
        lifespan="on",
        access_log=False,
        log_level=log_level,
        # uvicorn declares an int but only ever passes it to call_later.
        timeout_keep_alive=config.server.keepalive_timeout_s,  # type: ignore[arg-type]
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
