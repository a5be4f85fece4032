"""Fixtures of the stats tests: real ``redis-server`` processes, and samples with known values."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from gateway.samples import Outcome, Sample
from gateway.stats import StatsSnapshot
from tests.redis_server import RedisServer, RedisServerMissing

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


class FakeClock:
    """A wall clock that moves only when told to."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_sample(
    model: str = "m",
    deployment: str = "d",
    *,
    outcome: Outcome = "ok",
    ttft_s: float | None = 0.2,
    tokens_per_s: float | None = 100.0,
    e2e_s: float | None = 1.0,
    output_tokens: int | None = 50,
) -> Sample:
    return Sample(
        model=model,
        deployment=deployment,
        provider=deployment,
        endpoint="chat",
        stream=True,
        outcome=outcome,
        started_at=0.0,
        ttft_s=ttft_s,
        first_answer_s=ttft_s,
        tokens_per_s=tokens_per_s,
        e2e_s=e2e_s,
        output_tokens=output_tokens,
    )


def samples_of(snapshot: StatsSnapshot, model: str = "m", deployment: str = "d") -> int:
    """Samples of one deployment in a snapshot (0 when it has none)."""
    summary = snapshot.get(model, deployment)
    return 0 if summary is None else summary.samples


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


def total_outcomes(client: redis.Redis, prefix: str) -> int:
    """Samples stored in Redis under ``prefix``: every slice's outcome counts, summed."""
    total = 0
    for key in client.scan_iter(f"{{{prefix}:*"):
        fields = client.hgetall(str(key))
        total += sum(int(v) for f, v in fields.items() if str(f).startswith("outcome:"))
    return total
