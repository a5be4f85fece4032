"""Two gateway replicas under traffic, on a Redis that is failed over beneath them.

Why: the failover tests (cluster master killed, slot moved, Sentinel failover) all need the same
set-up and the same verdict: two real gateways (each its own stats store and rate limiter) on one
Redis topology, streaming clients on both, then zero failed requests, no dropped samples, and
both replicas showing the same leaderboard, which counts every answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from gateway.config import GatewayConfig, parse_config
from tests.support.fakes import FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

KEY = "sk-gw-failover-0123456789"
MODELS = ("alpha", "beta")
THREADS = 4
MAX_REQUESTS = 2_000  # per thread; the tests stop the traffic long before

FAST_STATS: dict[str, Any] = {
    "backend": "redis",
    "flush_interval_s": 0.05,
    "refresh_interval_s": 0.2,
    "redis_timeout_s": 0.5,
    "redis_request_timeout_s": 0.5,
    # Back off briefly: a failover lasts a second or two here, and the test waits for the catch-up.
    "redis_backoff_min_s": 0.05,
    "redis_backoff_max_s": 0.5,
    # A write counts once a replica has it: a failover promoting that replica cannot lose it.
    "redis_wait_replicas": 1,
}


def failover_config(fakes: list[FakeServer], stats: dict[str, Any], keys_dir: Path) -> GatewayConfig:
    """Two models, each on every fake provider; a client key with (generous) rate limits, so that
    every request also goes through the Redis rate limiter."""
    keys = keys_dir / "keys.toml"
    keys.write_text(f'[[keys]]\nname = "load"\nkey = "{KEY}"\nrequests_per_minute = 1000000\n')
    data: dict[str, Any] = {
        "stats": {**FAST_STATS, **stats},
        "auth": {"api_keys_file": str(keys)},
        "providers": [{"name": f.name, "base_url": f.base_url, "max_concurrency": 64} for f in fakes],
        "models": [
            {
                "name": model,
                "policy": "spread",
                "deployments": [{"provider": f.name, "model": f"{f.name}-up"} for f in fakes],
            }
            for model in MODELS
        ],
        # Every deployment keeps getting traffic, so every pair's slot is written throughout.
        "policies": {"spread": {"extends": "balanced", "explore_share": 0.5, "first_token_timeout_s": 5.0}},
    }
    return parse_config(data, source="failover.toml")


class Traffic:
    """Streaming clients spread over replicas and models until told to stop (bounded in count and time)."""

    def __init__(self, gateways: list[Gateway]) -> None:
        self.clients = [openai.OpenAI(base_url=g.base_url, api_key=KEY, max_retries=0) for g in gateways]
        self.ok = 0
        self.failures: list[BaseException] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(THREADS)]

    def _run(self, thread: int) -> None:
        deadline = time.monotonic() + 90
        for i in range(MAX_REQUESTS):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
            client = self.clients[(thread + i) % len(self.clients)]
            model = MODELS[(thread // len(self.clients) + i) % len(MODELS)]
            try:
                stream = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": f"q{i}"}], stream=True
                )
                text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
                assert text, "empty answer"
            except (openai.APIError, AssertionError) as exc:
                with self.lock:
                    self.failures.append(exc)
            else:
                with self.lock:
                    self.ok += 1

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def served_more_than(self, count: int) -> Callable[[], bool]:
        return lambda: self.ok > count

    def keep_going(self, more: int, what: str) -> None:
        """Wait until ``more`` further requests have been answered."""
        served = self.ok
        wait_until(self.served_more_than(served + more), timeout=30, what=what)


def stats_document(gateway: Gateway) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(
        gateway.url + "/v1/gateway/stats", headers={"authorization": f"Bearer {KEY}"}
    ).json()
    return document


def leaderboard(gateway: Gateway) -> dict[tuple[str, str], tuple[Any, ...]]:
    keys = ("samples", "success_rate", "ttft_p50_s", "tokens_per_s_p50", "e2e_p99_s")
    rows = stats_document(gateway)["data"]
    return {(row["model"], row["deployment"]): tuple(row[k] for k in keys) for row in rows}


def total_samples(board: dict[tuple[str, str], tuple[Any, ...]]) -> int:
    return sum(int(values[0]) for values in board.values())


def recorded(gateways: list[Gateway]) -> int:
    """Samples the replicas recorded (answers, and any hedge or fallback attempts beside them). A
    sample is recorded just after its answer's last byte, so this may still grow once traffic stops."""
    return sum(len(g.samples.samples) for g in gateways)


def assert_replicas_converge(gateways: list[Gateway], timeout: float = 20.0) -> None:
    """Both replicas' leaderboards become equal and count every sample recorded exactly once, within
    ``timeout``."""

    def converged() -> bool:
        stores = [stats_document(g)["store"] for g in gateways]
        if any(store["buffered_samples"] or store["degraded"] for store in stores):
            return False  # still writing what it holds
        boards = [leaderboard(g) for g in gateways]
        return all(b == boards[0] for b in boards) and total_samples(boards[0]) == recorded(gateways)

    try:
        wait_until(converged, timeout=timeout, what="both replicas to show the same leaderboard, counting every sample")
    except BaseException:
        print(
            {g.url: (total_samples(leaderboard(g)), stats_document(g)["store"]) for g in gateways}, recorded(gateways)
        )
        raise
    for gateway in gateways:
        # The stated bound: nothing dropped (the buffer holds far more than a failover's worth).
        assert stats_document(gateway)["store"]["dropped_samples"] == 0
