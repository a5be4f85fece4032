"""The demo's servers: each fake provider and the gateway a ``uvicorn.Server`` on its own loopback socket,
all of them tasks on the demo's one event loop (so Ctrl-C stops every one, and nothing is left behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from gateway.config import GatewayConfig
from gateway.connections import ConnectionLimits, guarded_protocol
from gateway.server import GatewayServer

GRACE_S = 3
"""How long a stop lets the requests in flight finish, unless a second signal comes first."""


class DemoError(Exception):
    """The demo cannot start (port taken, tokenizer missing); the message says what to do."""


class SharedLoopServer(GatewayServer):
    """A uvicorn server that leaves signals to the demo: several of them share one process and loop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(slots=True)
class Served:
    name: str
    server: SharedLoopServer
    sock: socket.socket
    task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port


def bind_socket(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP, and without it Nagle holds back each small SSE write for ~40 ms.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = " (try --port 0 for any free port)" if exc.errno in (98, 48) else ""
        raise DemoError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from exc
    return sock


def loopback_server(name: str, app: Any, sock: socket.socket, gateway: GatewayConfig | None = None) -> Served:
    """A server on ``sock``; the gateway's (``gateway`` given) with ``gateway serve``'s connection limits."""
    config = uvicorn.Config(
        app,
        http=guarded_protocol(ConnectionLimits.from_config(gateway)) if gateway is not None else "httptools",
        ws="none",
        lifespan="on",
        access_log=False,
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=GRACE_S,
    )
    if gateway is not None:
        config.timeout_keep_alive = gateway.server.keepalive_timeout_s  # type: ignore[assignment]
    return Served(name, SharedLoopServer(config), sock)
