"""Gateways started from an app the test built itself, with their URLs and live runtime at hand.

Why beside conftest's ``start_gateway``: the access-control tests add probe routes to the app,
give each replica its own rate limiter, or run it under ``gateway serve``'s protocol class, and
they read the running ``GatewayRuntime``; this helper only runs what it is given.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.runtime import GatewayRuntime, runtime_of
from tests.servers import ServerThread


class RunningGateway:
    def __init__(self, server: ServerThread, app: Any) -> None:
        self.server = server
        self.app = app
        self.url = server.url
        self.base_url = server.url + "/v1"

    @property
    def runtime(self) -> GatewayRuntime:
        return runtime_of({"app": self.app})


class GatewayServers:
    """Starts apps on loopback; ``stop`` ends them all (a fixture calls it at teardown)."""

    def __init__(self) -> None:
        self.started: list[ServerThread] = []

    def start(self, app: Any, *, http: type[asyncio.Protocol] | None = None) -> RunningGateway:
        server = ServerThread(app)
        if http is not None:
            server.server.config.http = http
        self.started.append(server.start())
        return RunningGateway(server, app)

    def stop(self) -> None:
        for server in reversed(self.started):
            server.stop()
