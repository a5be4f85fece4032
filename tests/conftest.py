"""Fixtures shared by the test suite: fake providers and gateways on real loopback servers.

The classes behind them live in ``tests.support``; tests import those from there.
"""

from __future__ import annotations

import os

# The routing modules as Python, so that coverage sees them, unless a run asks for the compiled ones
# (``GATEWAY_NATIVE=1`` after ``make native``; ``tests/test_native.py`` compares the two). Set before the
# first gateway import: ``gateway.routing`` decides when it is imported (``gateway.native``).
os.environ.setdefault("GATEWAY_NATIVE", "0")

from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402
import pytest  # noqa: E402

from gateway.config import GatewayConfig  # noqa: E402
from tests.raw_upstream import Mode, RawUpstream  # noqa: E402
from tests.redis_server import RedisServerMissing  # noqa: E402
from tests.redis_topologies import SENTINEL_PASSWORD, LoopbackCluster, SentinelGroup  # noqa: E402
from tests.support.fakes import Fakes  # noqa: E402
from tests.support.gateway import Gateway, GatewayServers  # noqa: E402
from tests.support.servers import ServerThread, stop_all  # noqa: E402


@pytest.fixture(autouse=True)
def sdk_clients_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every synchronous SDK client a test makes is closed when the test ends. An unclosed client keeps its pooled
    socket until the garbage collector finds it, in whichever later test a collection happens to run; its
    ResourceWarning (an error in this suite) then fails a test that did nothing wrong."""
    made: list[openai.OpenAI | anthropic.Anthropic] = []
    for cls in (openai.OpenAI, anthropic.Anthropic):
        monkeypatch.setattr(cls, "__init__", _tracked_init(cls.__init__, made))
    yield
    for client in made:
        client.close()


def _tracked_init(init: Callable[..., None], made: list[Any]) -> Callable[..., None]:
    def tracked(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    return tracked


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


@pytest.fixture
def raw() -> Iterator[Callable[..., RawUpstream]]:
    """Start loopback upstreams that answer with exact bytes (``tests.raw_upstream``); each stops with the test."""
    started: list[RawUpstream] = []

    def start(mode: Mode, script: bytes = b"", filler: bytes = b"") -> RawUpstream:
        upstream = RawUpstream(mode, script, filler=filler).start()
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        upstream.stop()


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
