"""Two gateway processes on one Redis: what one measures, the other shows within a refresh, and
neither counts a sample twice; each one's ``/metrics`` counts its own traffic, its window gauges the shared
window. Real processes (``python -m gateway serve``), real Redis."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.fakes import FakeBehavior
from tests.redis_server import RedisServer, free_port
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until

REFRESH_S = 0.5
FLUSH_S = 0.1


def write_config(path: Path, fakes: list[FakeServer], redis_url: str, prefix: str) -> None:
    """Model ``m`` on one deployment per fake, in config order (the test policy tries them in that order)."""
    providers = "".join(f'\n[[providers]]\nname = "{f.name}"\nbase_url = "{f.base_url}"\n' for f in fakes)
    deployments = "".join(
        f'\n  [[models.deployments]]\n  provider = "{f.name}"\n  model = "upstream"\n'
        "  price_in = 1.0\n  price_out = 2.0\n"
        for f in fakes
    )
    path.write_text(
        f"""
[stats]
backend = "redis"
redis_url = "{redis_url}"
key_prefix = "{prefix}"
refresh_interval_s = {REFRESH_S}
flush_interval_s = {FLUSH_S}
{providers}
[[models]]
name = "m"
policy = "test"
{deployments}
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
    write_config(config, [fake], redis_server.url, prefix)
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


@pytest.fixture
def two_deployments(
    fakes: Fakes, redis_server: RedisServer, prefix: str, tmp_path: Path
) -> Iterator[list[GatewayProcess]]:
    fast = fakes.start("fast", FakeBehavior(ttft_s=0.01, output_tokens=16, tokens_per_s=2000))
    slow = fakes.start("slow", FakeBehavior(ttft_s=0.05, output_tokens=16, tokens_per_s=300))
    config = tmp_path / "gateway.toml"
    write_config(config, [fast, slow], redis_server.url, prefix)
    processes = [GatewayProcess(config, tmp_path / f"gateway-{i}.log") for i in range(2)]
    try:
        for process in processes:
            wait_until(process.ready, timeout=30, what=f"the gateway on port {process.port} to be ready")
        yield processes
    finally:
        for process in processes:
            process.stop()


def _send_to(process: GatewayProcess, deployment: str, count: int) -> None:
    """``count`` streams to one deployment (OpenRouter's ``provider.only``), each read to its end."""
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True}
    for _ in range(count):
        with httpx.stream(
            "POST", process.url + "/v1/chat/completions", json={**body, "provider": {"only": [deployment]}}, timeout=30
        ) as response:
            assert response.status_code == 200 and b"[DONE]" in response.read()
            assert response.headers["x-gateway-provider"] == deployment


def _metric(process: GatewayProcess, name: str, **labels: str) -> float:
    text = httpx.get(process.url + "/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name}{labels} is not on {process.url}/metrics")


def test_each_replica_shows_the_shared_window_and_counts_only_its_own_traffic(
    two_deployments: list[GatewayProcess],
) -> None:
    a, b = two_deployments
    sent = {(a, "fast"): 6, (a, "slow"): 3, (b, "fast"): 4, (b, "slow"): 5}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(_send_to, process, name, n) for (process, name), n in sent.items()]:
            future.result()
    totals = {"fast": 10, "slow": 8}

    def shows_both(process: GatewayProcess) -> bool:
        return {row["deployment"]: row["samples"] for row in process.stats()["data"]} == totals

    for process in (a, b):
        shown = functools.partial(shows_both, process)
        wait_until(shown, timeout=10, what=f"{process.url} to show both replicas' samples")
    # A few refreshes later nothing was counted twice, and both show one window, fastest first.
    taken = b.stats()["taken_at"]
    wait_until(lambda: b.stats()["taken_at"] > taken + 3 * REFRESH_S, timeout=10, what="a few more refreshes")
    rows_a, rows_b = a.stats()["data"], b.stats()["data"]
    assert [row["deployment"] for row in rows_a] == [row["deployment"] for row in rows_b] == ["fast", "slow"]
    keys = ("samples", "judged", "success_rate", "ttft_p50_s", "ttft_p99_s", "tokens_per_s_p50", "e2e_p95_s")
    assert [[row[k] for k in keys] for row in rows_a] == [[row[k] for k in keys] for row in rows_b]
    for process in (a, b):  # the dashboard is the same window, as a page
        page = httpx.get(process.url + "/dashboard", timeout=5).text
        assert f"<b>{sum(totals.values())}</b> samples" in page
        assert page.index(">fast<") < page.index(">slow<")

    for deployment, total in totals.items():
        # Counters are each replica's own: summed over the replicas, every attempt once.
        attempts = {"model": "m", "provider": deployment, "outcome": "ok"}
        own = [_metric(p, "gateway_upstream_requests_total", **attempts) for p in (a, b)]
        assert own == [sent[(a, deployment)], sent[(b, deployment)]]
        answered = {"model": "m", "provider": deployment, "status_class": "2xx"}
        assert sum(_metric(p, "gateway_requests_total", **answered) for p in (a, b)) == total
        assert sum(_metric(p, "gateway_ttft_seconds_count", model="m", provider=deployment) for p in (a, b)) == total
        # The window gauges are the shared window, the same on each (the dashboard takes their max, never a sum).
        labels = {"model": "m", "provider": deployment, "deployment": deployment}
        assert [_metric(p, "gateway_window_samples", **labels) for p in (a, b)] == [total, total]
