"""The project's fake provider, started on loopback servers on demand.

Why: the gateway is tested against real HTTP; ``gateway.fakes.FakeProvider`` is steered per
request (``"fake": {...}`` in the body) or per server (``FakeBehavior``), and records what it saw.
"""

from __future__ import annotations

from typing import Any

from gateway.fakes import FakeBehavior, FakeProvider
from tests.support.servers import ServerThread, stop_all


class FakeServer:
    """A running fake provider: ``base_url`` is what a config's provider points at."""

    def __init__(self, app: FakeProvider, server: ServerThread) -> None:
        self.app = app
        self.server = server
        self.url = server.url
        self.base_url = server.url + "/v1"
        self.name = app.name


class Fakes:
    """Starts fake providers on demand; ``stop`` ends them all (the ``fakes`` fixture does, after the test)."""

    def __init__(self, servers: list[ServerThread] | None = None) -> None:
        self.servers: list[ServerThread] = [] if servers is None else servers

    def start(self, name: str = "fake", behavior: FakeBehavior | None = None, **options: Any) -> FakeServer:
        app = FakeProvider(name, behavior or FakeBehavior(), **{"record": True, **options})
        server = ServerThread(app).start()
        self.servers.append(server)
        return FakeServer(app, server)

    def stop(self) -> None:
        stop_all(self.servers)
