"""Fixtures shared by the test suite: fake providers and gateways on real loopback servers.

The classes behind them live in ``tests.support``; tests import those from there.

``--router belief`` serves every gateway the tests start with the belief router instead of the
measured one (``GATEWAY_ROUTER``, ``gateway.routing.serving``): the end-to-end tests are the
contract both must keep. ``BELIEF_E2E`` lists the modules that hold them.
"""

from __future__ import annotations

import os

# The routing modules as Python, so that coverage sees them, unless a run asks for the compiled ones
# (``GATEWAY_NATIVE=1`` after ``make native``; ``tests/test_native.py`` compares the two). Set before the
# first gateway import: ``gateway.routing`` decides when it is imported (``gateway.native``).
os.environ.setdefault("GATEWAY_NATIVE", "0")

from collections.abc import Callable, Iterator  # noqa: E402

import pytest  # noqa: E402

from gateway.config import GatewayConfig  # noqa: E402
from gateway.routing.serving import ROUTER_ENV, ROUTER_KINDS  # noqa: E402
from tests.redis_server import RedisServerMissing  # noqa: E402
from tests.redis_topologies import SENTINEL_PASSWORD, LoopbackCluster, SentinelGroup  # noqa: E402
from tests.support.fakes import Fakes  # noqa: E402
from tests.support.gateway import Gateway, GatewayServers  # noqa: E402
from tests.support.servers import ServerThread, stop_all  # noqa: E402

BELIEF_E2E = (
    "tests/test_proxy.py",
    "tests/test_streaming.py",
    "tests/test_hedging.py",
    "tests/test_affinity.py",
    "tests/test_sessions.py",
    "tests/test_recovery.py",
    "tests/test_recovery_learning.py",
    "tests/test_recovery_return.py",
    "tests/test_circuit_recovery.py",
    "tests/test_retries.py",
    "tests/test_attempts.py",
    "tests/test_capacity.py",
    "tests/test_capacity_limits.py",
    "tests/test_capacity_scope.py",
    "tests/test_drain.py",
    "tests/test_race_refusals.py",
    "tests/test_trace.py",
    "tests/test_overrides.py",
    "tests/test_reload.py",
    "tests/test_dashboard_endpoint.py",
    "tests/test_faults.py",
    "tests/test_quality_routing.py",
    "tests/test_translate_routing.py",
    "tests/test_translate_recovery.py",
    "tests/test_routing_belief_explained.py",
)
"""The end-to-end routing, hedging, affinity, recovery, fallback, capacity, drain, queue and trace tests: run them
with ``--router belief`` to check the belief router serves the live gateway."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--router",
        choices=ROUTER_KINDS,
        default=None,
        help="the router every gateway under test serves with (default: the gateway's own default)",
    )


def pytest_configure(config: pytest.Config) -> None:
    kind = config.getoption("--router")
    if kind is not None:
        os.environ[ROUTER_ENV] = kind  # read by ``create_app`` for every app a test builds


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


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """One Redis Cluster (3 masters, 3 replicas) for the session; tests keep apart by key prefix and
    must leave its topology as they found it (the failover tests start clusters of their own)."""
    try:
        cluster = LoopbackCluster(tmp_path_factory.mktemp("cluster")).start()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    """A master, a replica and three sentinels, all requiring ``SENTINEL_PASSWORD``, for the session."""
    try:
        group = SentinelGroup(tmp_path_factory.mktemp("sentinel"), password=SENTINEL_PASSWORD).start()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield group
    group.stop()
