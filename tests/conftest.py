"""Fixtures shared by the test suite: fake providers and gateways on real loopback servers."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig, parse_config
from gateway.fakes import FakeBehavior, FakeProvider
from gateway.metrics import Metrics
from gateway.samples import SampleLog
from tests.redis_server import RedisServerMissing
from tests.redis_topologies import LoopbackCluster, SentinelGroup
from tests.servers import ServerThread, stop_all

SHARED_TIKTOKEN = Path(__file__).resolve().parents[2] / "shared" / "tiktoken"
if "TIKTOKEN_CACHE_DIR" not in os.environ and SHARED_TIKTOKEN.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(SHARED_TIKTOKEN)


class Fakes:
    """Starts fake providers on demand; all are stopped at the end of the test."""

    def __init__(self, servers: list[ServerThread] | None = None) -> None:
        self.servers: list[ServerThread] = [] if servers is None else servers

    def start(self, name: str = "fake", behavior: FakeBehavior | None = None, **options: Any) -> FakeServer:
        app = FakeProvider(name, behavior or FakeBehavior(), record=True, **options)
        server = ServerThread(app).start()
        self.servers.append(server)
        return FakeServer(app, server)

    def stop(self) -> None:
        stop_all(self.servers)


class FakeServer:
    def __init__(self, app: FakeProvider, server: ServerThread) -> None:
        self.app = app
        self.server = server
        self.url = server.url
        self.base_url = server.url + "/v1"
        self.name = app.name


@pytest.fixture
def test_servers() -> Iterator[list[ServerThread]]:
    """Every server a test starts (fakes and gateways), stopped together at its end."""
    servers: list[ServerThread] = []
    yield servers
    stop_all(servers)


@pytest.fixture
def fakes(test_servers: list[ServerThread]) -> Fakes:
    return Fakes(test_servers)


def gateway_config(
    providers: list[FakeServer],
    *,
    model: str = "m",
    policy: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    deployments: dict[str, dict[str, Any]] | None = None,
) -> GatewayConfig:
    """A config with one model deployed on each given fake provider, in order.

    ``deployments`` adds keys to the deployment on the named provider, e.g. ``{"b": {"continue_prefill": True}}``.
    """
    data: dict[str, Any] = {
        "providers": [{"name": p.name, "base_url": p.base_url, "max_concurrency": 256} for p in providers],
        "models": [
            {
                "name": model,
                "policy": "test",
                "deployments": [
                    {
                        "provider": p.name,
                        "model": f"{p.name}-upstream",
                        "price_in": 1.0,
                        "price_out": 2.0,
                        **(deployments or {}).get(p.name, {}),
                    }
                    for p in providers
                ],
            }
        ],
        # Config order, no exploration: these tests are about the attempt loop, not about ranking.
        "policies": {
            "test": {"extends": "fixed-order", "first_token_timeout_s": 5.0, "idle_timeout_s": 5.0, **(policy or {})}
        },
    }
    for key, value in (extra or {}).items():
        data[key] = value
    return parse_config(data, source="test.toml")


class Gateway:
    def __init__(self, server: ServerThread, samples: SampleLog, metrics: Metrics) -> None:
        self.server = server
        self.url = server.url
        self.base_url = server.url + "/v1"
        self.samples = samples
        self.metrics = metrics
        """The app's own ``Metrics``; read values with ``metrics.registry.get_sample_value(...)``."""


@pytest.fixture
def start_gateway(test_servers: list[ServerThread]) -> Callable[..., Gateway]:
    def start(config: GatewayConfig, environ: dict[str, str] | None = None) -> Gateway:
        samples = SampleLog()
        options = AppOptions(environ=environ or {}, sinks=[samples])
        app = create_app(config, options)
        server = ServerThread(app).start()
        test_servers.append(server)
        return Gateway(server, samples, options.metrics)

    return start


SENTINEL_PASSWORD = "s3nt1nel-pw"
"""The session Sentinel group's password (master, replica and sentinels), given through the environment."""
SENTINEL_ENVIRON = {"REDIS_PASSWORD": SENTINEL_PASSWORD, "SENTINEL_PASSWORD": SENTINEL_PASSWORD}


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
