"""Fixtures shared by the test suite: fake providers and gateways on real loopback servers.

The classes behind them live in ``tests.support``; tests import those from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.config import GatewayConfig
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway, GatewayServers
from tests.support.servers import ServerThread, stop_all


@pytest.fixture
def test_servers() -> Iterator[list[ServerThread]]:
    """Every server a test starts (fakes and gateways), stopped together at its end."""
    servers: list[ServerThread] = []
    yield servers
    stop_all(servers)


@pytest.fixture
def fakes(test_servers: list[ServerThread]) -> Fakes:
    return Fakes(test_servers)


@pytest.fixture
def start_gateway(test_servers: list[ServerThread]) -> Callable[..., Gateway]:
    """Start a gateway for a config (``start_gateway(config, environ=None)``); stopped after the test."""
    servers = GatewayServers(test_servers)

    def start(config: GatewayConfig, environ: dict[str, str] | None = None) -> Gateway:
        return servers.start(config, environ)

    return start
