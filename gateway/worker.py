"""One worker of ``gateway serve --workers N``: a full replica serving the socket its supervisor bound.

The supervisor (``gateway.supervisor``) starts it as ``python -m gateway.worker …`` with a readiness
pipe (and, off Linux, the listening socket) as inherited file descriptors; it is not meant to be
run by hand. The
worker loads the config itself and builds its own app (router, stats store, rate limiter, Redis
clients: a replica like any other), and beyond that:

- listens on a socket of its own bound with ``SO_REUSEPORT`` (Linux), or on the supervisor's;
- writes one byte on the readiness pipe once it serves: the supervisor forwards SIGHUP only then,
  since a SIGHUP that reaches a process before its app handles it would end the process;
- adds ``x-gateway-worker: <index>`` to its responses, so a client can tell which worker answered;
- every second publishes what its metrics otherwise set only when scraped (samples dropped, store
  health, capacity), so that a scrape answered by another worker sees them (``gateway.metrics.host``);
- ends with its supervisor (``PR_SET_PDEATHSIG`` on Linux, and a check of its parent at start):
  a worker never keeps serving a port alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.background import every
from gateway.config import ConfigError, load_config
from gateway.server import GatewayServer

logger = logging.getLogger("gateway.workers")

STARTUP_FAILED = 3
"""Exit status of a worker that could not start serving (uvicorn's own for a failed lifespan)."""
PUBLISH_INTERVAL_S = 1.0
WORKER_HEADER = b"x-gateway-worker"


class WorkerHeader:
    """Pure ASGI: adds ``x-gateway-worker: <index>`` to every HTTP response of ``app``."""

    def __init__(self, app: ASGIApp, index: int) -> None:
        self.app = app
        self.header = (WORKER_HEADER, str(index).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = self.header

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        await self.app(scope, receive, send_with_header)


class WorkerServer(GatewayServer):
    """uvicorn's server, telling the supervisor once it serves, and publishing metrics while it does."""

    def __init__(self, config: uvicorn.Config, app: Any, ready_fd: int) -> None:
        super().__init__(config)
        self.gateway_app = app
        self.ready_fd = ready_fd
        self._publisher: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._publisher = asyncio.create_task(self._publish(), name="worker-metrics")
            os.write(self.ready_fd, b"r")
            os.close(self.ready_fd)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._publisher is not None:
            self._publisher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._publisher
        await super().shutdown(sockets)

    async def _publish(self) -> None:
        # A tick that fails is logged and the next one publishes again: the host's scrape must not freeze.
        await every(lambda: PUBLISH_INTERVAL_S, self._publish_once, "publishing this worker's gauges")

    async def _publish_once(self) -> None:
        state = self.gateway_app.state
        state.runtime.current.observe_gauges(state.metrics)


def _follow_parent(parent: int) -> None:
    """End this process when the supervisor does, however it ends (SIGKILL included)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above: nobody would stop us
        raise SystemExit(1)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway.worker", description="(started by gateway serve)")
    parser.add_argument("--fd", type=int, required=True, help="the supervisor's listening socket; -1: bind one")
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="info")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _follow_parent(args.parent)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's lifespan handles it
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from gateway.accesslog import configure_access_log
    from gateway.app import AppOptions, create_app
    from gateway.metrics.host import WorkerMetrics
    from gateway.server import run, uvicorn_config
    from gateway.supervisor import bind_socket
    from gateway.tokens import TokenizerError, load_token_counter

    configure_access_log()
    try:
        # A socket of its own in the port's SO_REUSEPORT group, or the one the supervisor shares.
        sock = socket.socket(fileno=args.fd) if args.fd >= 0 else bind_socket(args.host, args.port, listen=True)
    except OSError as exc:
        logger.error("worker %d: cannot listen on %s:%d: %s", args.index, args.host, args.port, exc)
        return STARTUP_FAILED
    try:
        config = load_config(args.config)
        metrics = WorkerMetrics(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        options = AppOptions(config_path=args.config, reload_on_sighup=True, metrics=metrics)
        app = create_app(config, options)
        load_token_counter(config.stats.tokenizer)
    except (ConfigError, TokenizerError) as exc:
        logger.error("worker %d: %s", args.index, exc)
        return STARTUP_FAILED
    server = WorkerServer(
        uvicorn_config(WorkerHeader(app, args.index), config, args.host, args.port, args.log_level), app, args.ready_fd
    )
    return run(server, sockets=[sock])


if __name__ == "__main__":
    raise SystemExit(main())
