"""Two gateway processes on one Redis: what one measures, the other shows within a refresh, and
neither counts a sample twice. Real processes (``python -m gateway serve``), real Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from tests.redis_server import RedisServer, free_port
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until

REFRESH_S = 0.5
FLUSH_S = 0.1


def write_config(path: Path, fake: FakeServer, redis_url: str, prefix: str) -> None:
    path.write_text(
        f"""
[stats]
backend = "redis"
redis_url = "{redis_url}"
key_prefix = "{prefix}"
refresh_interval_s = {REFRESH_S}
flush_interval_s = {FLUSH_S}

[[providers]]
name = "{fake.name}"
base_url = "{fake.base_url}"

[[models]]
name = "m"
policy = "test"

  [[models.deployments]]
  provider = "{fake.name}"
  model = "upstream"
  price_in = 1.0
  price_out = 2.0

[policies.test]
first_token_timeout_s = 5.0
""",
        encoding="utf-8",
    )


class GatewayProcess:
    def __init__(self, config: Path, logs: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in ("GATEWAY_API_KEYS", "GATEWAY_CONFIG")}
        self.log = logs.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "-c", str(config), "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def ready(self) -> bool:
        assert self.process.poll() is None, f"gateway exited with status {self.process.returncode}"
        try:
            status: str = httpx.get(self.url + "/readyz", timeout=1).json()["status"]
            return status == "ready"
        except httpx.HTTPError:
            return False

    def stats(self) -> dict[str, Any]:
        document: dict[str, Any] = httpx.get(self.url + "/v1/gateway/stats", timeout=5).json()
        return document

    def samples(self) -> int:
        (row,) = self.stats()["data"]
        count: int = row["samples"]
        return count

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()


@pytest.fixture
def replicas(fakes: Fakes, redis_server: RedisServer, prefix: str, tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    fake = fakes.start("steady", FakeBehavior(output_tokens=16, tokens_per_s=4000, tps_jitter=0.5, seed=5))
    config = tmp_path / "gateway.toml"
    write_config(config, fake, redis_server.url, prefix)
    processes = [GatewayProcess(config, tmp_path / f"gateway-{i}.log") for i in range(2)]
    try:
        for process in processes:
            wait_until(process.ready, timeout=30, what=f"the gateway on port {process.port} to be ready")
        yield processes
    finally:
        for process in processes:
            process.stop()


def send(process: GatewayProcess, count: int) -> None:
    client = openai.OpenAI(base_url=process.url + "/v1", api_key="unused", max_retries=0)
    for i in range(count):
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}], stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_samples_taken_by_one_replica_appear_in_the_other(replicas: list[GatewayProcess]) -> None:
    a, b = replicas
    send(a, 20)
    wait_until(lambda: a.samples() == 20, timeout=5, what="replica A to count its own samples")
    # Visible to B after A's next flush and B's next refresh; the deadline is generous for slow CI.
    wait_until(lambda: b.samples() == 20, timeout=5 * (REFRESH_S + FLUSH_S) + 2, what="replica B to see A's samples")

    send(b, 10)
    wait_until(lambda: b.samples() == 30, timeout=5, what="replica B to count its own samples")
    wait_until(lambda: a.samples() == 30, timeout=5 * (REFRESH_S + FLUSH_S) + 2, what="replica A to see B's samples")

    # Several refreshes later neither has counted anything twice, and both show the same window.
    taken = b.stats()["taken_at"]
    wait_until(lambda: b.stats()["taken_at"] > taken + 3 * REFRESH_S, timeout=10, what="a few more refreshes")
    rows_a, rows_b = a.stats()["data"], b.stats()["data"]
    assert rows_a[0]["samples"] == rows_b[0]["samples"] == 30
    keys = ("tokens_per_s_p50", "tokens_per_s_p95_floor", "ttft_p95_s", "e2e_p99_s", "success_rate")
    assert [rows_a[0][k] for k in keys] == [rows_b[0][k] for k in keys]
