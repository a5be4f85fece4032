"""Two gateway replicas under traffic, on a Redis that is failed over beneath them.

Why: the failover tests (cluster master killed, slot moved, Sentinel failover) all need the same
set-up and the same verdict: two real gateways (each its own stats store and rate limiter) on one
Redis topology, streaming clients on both, then zero failed requests, no dropped samples, and
both replicas showing the same leaderboard, which counts every answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from gateway.config import GatewayConfig, parse_config
from tests.support.fakes import FakeServer
from tests.support.gateway import Gateway
from tests.support.traffic import Traffic
from tests.support.wait import wait_until

KEY = "sk-gw-failover-0123456789"
MODELS = ("alpha", "beta")

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


def failover_traffic(gateways: list[Gateway]) -> Traffic:
    """Streaming clients over both replicas and both models (each pair's slot written throughout)."""
    return Traffic([g.base_url for g in gateways], models=MODELS, api_key=KEY, time_limit_s=90.0)


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
