"""A gateway served on loopback, with what it measured and its live runtime at hand.

Why one harness: end-to-end tests start a gateway from a config (``start_gateway`` fixture:
samples captured, metrics private), and access-control tests start an app they built themselves
(probe routes, their own rate limiter, ``gateway serve``'s protocol class); both get a ``Gateway``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig
from gateway.metrics.series import Metrics
from gateway.runtime import GatewayRuntime, runtime_of
from gateway.samples import SampleLog
from tests.support.servers import ServerThread


class Gateway:
    """A running gateway: ``base_url`` is what an SDK points at."""

    def __init__(self, server: ServerThread, app: Any, samples: SampleLog | None = None) -> None:
        self.server = server
        self.app = app
        self.url = server.url
        self.base_url = server.url + "/v1"
        self.samples = samples if samples is not None else SampleLog()
        """Every attempt's ``Sample`` (when the harness built the app)."""

    @property
    def metrics(self) -> Metrics:
        """The app's own ``Metrics``; read values with ``metrics.registry.get_sample_value(...)``."""
        metrics: Metrics = self.app.state.metrics
        return metrics

    @property
    def runtime(self) -> GatewayRuntime:
        return runtime_of({"app": self.app})


class GatewayServers:
    """Serves gateways on loopback; ``stop`` ends them all (the fixtures call it at teardown)."""

    def __init__(self, started: list[ServerThread] | None = None) -> None:
        self.started: list[ServerThread] = [] if started is None else started

    def start(self, config: GatewayConfig, environ: dict[str, str] | None = None) -> Gateway:
        """The gateway for ``config``, its samples captured."""
        samples = SampleLog()
        app = create_app(config, AppOptions(environ=environ or {}, sinks=[samples]))
        return self.serve(app, samples=samples)

    def serve(
        self, app: Any, *, samples: SampleLog | None = None, http: type[asyncio.Protocol] | None = None
    ) -> Gateway:
        """Serve an app the test built itself (``http``: the server's protocol class, as ``gateway serve`` sets)."""
        server = ServerThread(app)
        if http is not None:
            server.server.config.http = http
        self.started.append(server.start())
        return Gateway(server, app, samples)

    def stop(self) -> None:
        for server in reversed(self.started):
            server.stop()
        self.started.clear()
