"""Running the app under uvicorn: connection limits at the protocol, graceful shutdown, clean exit.

Why a protocol subclass: uvicorn's httptools protocol (the fast one ``gateway serve`` uses) has
no limit on the size of a request head, no deadline for a head or a body, and no cap on open
connections; ``gateway.connections.GuardedProtocol`` adds them, from ``[limits] max_header_bytes``
and ``[server] header_timeout_s``, ``body_timeout_s``, ``max_connections``. The app's
``HeaderSizeLimit`` middleware checks again the head that did complete.

Shutdown (``GatewayServer``): on SIGTERM (or Ctrl-C) the server stops accepting, lets requests in
flight, streams included, run for up to ``[server] shutdown_grace_s``, then runs the lifespan's
shutdown, which flushes the stats store and closes every client. A second SIGTERM or SIGINT cuts
the wait short: the requests still open are aborted, and the lifespan's shutdown runs all the same.
uvicorn alone re-raises the signal at the end so that the process dies of it; a stop we asked for
is a success, so the process exits 0 instead, however many signals it took. A Ctrl-C before the
server took the signals (while the config and the tokenizer load) interrupts the start: ``gateway.cli``
exits 130.

Why a server subclass: uvicorn alone, on a second Ctrl-C (``force_exit``), skips both the wait and
the lifespan's shutdown and returns with the request tasks and the lifespan's task still pending;
``asyncio.run`` then cancels them while it closes the loop, and uvicorn reports each cancellation as
an application error, with a traceback ("Exception in ASGI application", "Exception in 'lifespan'
protocol"). Its grace period ends the same way. Here every stop ends in one order: stop accepting,
wait, abort what is left (the connection closes first, so the client sees it end and the app sees a
disconnect; a task still running then is cancelled, and that cancellation is the stop's, not the
app's failure), then the lifespan's shutdown: nothing is left for the loop's close to cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.config import GatewayConfig
from gateway.connections import ConnectionLimits, guarded_protocol
from gateway.descriptors import raise_open_file_limit

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
ABORT_WAIT_S = 1.0
"""After closing the connections of a forced stop: how long apps get to notice the disconnect and end by
themselves (the gateway then still records the attempt) before their tasks are cancelled."""
FORCED_LIFESPAN_S = 5.0
"""A forced stop's bound on the lifespan's shutdown (flushing the stats store, closing clients)."""
logger = logging.getLogger("uvicorn.error")
"""uvicorn's own: the stop's lines are the server's, and follow ``--log-level`` as uvicorn's do."""
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


class _StopAware:
    """The outermost ASGI layer: a cancellation that the server's stop caused ends the task quietly.

    uvicorn logs any exception out of a request or the lifespan, ``CancelledError`` included, with a
    traceback; once the server aborts, a cancelled task is the stop working, not a failure.
    """

    def __init__(self, app: ASGIApp, server: GatewayServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if not self.server.aborting:
                raise


class GatewayServer(uvicorn.Server):
    """uvicorn's server with a stop that ends everything it started (see the module docstring).

    ``force_exit`` (a second stop signal; the demo sets it too) ends the wait for open requests.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.aborting = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if not isinstance(self.config.loaded_app, _StopAware):
            self.config.loaded_app = _StopAware(self.config.loaded_app, self)
        await super().startup(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, without re-raising the signals at the end: the process then exits 0, not by the signal."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn forces only on a second SIGINT; a second SIGTERM (a supervisor's, or `timeout`'s and
        # make's both reaching the process) is as plain a request to stop now.
        again, forced = self.should_exit, self.force_exit
        super().handle_exit(sig, frame)
        if again:
            if not forced:
                logger.info("%s again: stopping now, without waiting for open requests", signal.Signals(sig).name)
            self.force_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        logger.info("Shutting down")
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle ones close now, busy ones once their response is sent
        grace = self.config.timeout_graceful_shutdown
        try:
            async with asyncio.timeout(grace):
                await self._wait_open_requests()
        except TimeoutError:
            logger.info("shutdown grace of %gs exceeded", grace)
        if self.server_state.connections or self.server_state.tasks:
            await self._abort()
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()
            return
        try:
            async with asyncio.timeout(FORCED_LIFESPAN_S):
                await self.lifespan.shutdown()
        except TimeoutError:
            self.aborting = True  # the loop's close cancels the lifespan's task: quietly, as the stop's
            logger.warning("the application's shutdown did not finish within %gs", FORCED_LIFESPAN_S)

    async def _wait_open_requests(self) -> None:
        if self.server_state.connections or self.server_state.tasks:
            logger.info("Waiting for connections to close. (CTRL+C to force quit)")
        while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
            await asyncio.sleep(0.05)

    async def _abort(self) -> None:
        """Close every connection left, give the apps a moment to see it, then cancel what still runs."""
        self.aborting = True
        connections = list(self.server_state.connections)
        logger.info("closing %d open connection(s)", len(connections))
        for connection in connections:
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
            cycle = getattr(connection, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # before the loop runs connection_lost: the app's sends are dropped
        tasks = set(self.server_state.tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=ABORT_WAIT_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=ABORT_WAIT_S)


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
    # The server takes the stop signals before anything else runs here: a Ctrl-C from now on asks it to stop
    # (status 0) instead of raising KeyboardInterrupt wherever the interpreter is, which a finalizer swallows (a
    # weakref callback in the collection below did: the interrupt was lost and the server went on serving).
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in _STOP_SIGNALS}
    try:
        tune_garbage_collector()
        raise_open_file_limit()
        server.run(sockets=sockets)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1
