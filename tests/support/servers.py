"""Run ASGI apps under a real uvicorn on a free loopback port, in a background thread.

Why: the gateway's tests talk real HTTP to real servers (the gateway and fake providers),
while the test itself uses the blocking OpenAI SDK or its own event loop. Each server gets its
own thread and event loop, as separate processes would, and ``stop`` waits for a clean
shutdown (lifespan included) so that nothing outlives its test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import uvicorn


class ServerThread:
    """A uvicorn server running ``app`` in a thread. ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, app: Any, *, port: int = 0, lifespan: Literal["auto", "on", "off"] = "on") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit this. asyncio sets TCP_NODELAY only on sockets whose proto is
        # IPPROTO_TCP, and this one's is 0: without it, Nagle's algorithm held each response's
        # second write until the client's delayed ACK, adding ~40 ms to every TTFT measured on
        # a kept-alive connection (`gateway serve` lets uvicorn bind, which sets it).
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.bind(("127.0.0.1", port))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            lifespan=lifespan,
            log_level="warning",
            access_log=False,
            loop="asyncio",
            http="httptools",
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=f"server-{self.port}", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # reported to the test thread by start()/stop()
            self._error = exc
        finally:
            loop.close()

    def start(self) -> ServerThread:
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"server failed to start: {self._error!r}")
            self._thread.join(0.005)
        return self

    def request_stop(self) -> None:
        """Ask the server to shut down, without waiting (see ``stop_all``)."""
        self.server.should_exit = True

    def stop(self) -> None:
        self.request_stop()
        self._thread.join(15)
        self.sock.close()
        if self._thread.is_alive():
            raise RuntimeError(f"server on port {self.port} did not stop")

    def call(self, coro: Any, timeout: float = 10) -> Any:
        """Run a coroutine on the server's own loop (to poke at its state safely) and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def stop_all(servers: list[ServerThread]) -> None:
    """Stop several servers at once: uvicorn's shutdown takes ~0.2 s each, so overlap them."""
    for server in servers:
        server.request_stop()
    for server in servers:
        server.stop()


@contextmanager
def serve(app: Any, *, port: int = 0) -> Iterator[ServerThread]:
    server = ServerThread(app, port=port).start()
    try:
        yield server
    finally:
        server.stop()
