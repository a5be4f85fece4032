"""Fixtures of the stats tests: real ``redis-server`` processes, and samples with known values."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_server import RedisServer, RedisServerMissing
from tests.support.clock import FakeClock

_prefixes = itertools.count()


def _server(workdir: Path) -> RedisServer:
    try:
        return RedisServer(workdir)
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the session; tests keep apart by key prefix (see ``prefix``)."""
    server = _server(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own, which the test may kill and restart."""
    server = _server(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def prefix() -> str:
    return f"test{next(_prefixes)}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
