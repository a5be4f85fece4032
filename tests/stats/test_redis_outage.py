"""Redis killed and restarted while a real gateway serves traffic: no request fails, ``/readyz``
says degraded (still 200) and then ready, and the samples held through the outage reach Redis."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.stats.redis_store import RedisStatsStore
from tests.redis_server import RedisServer
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.stats import total_outcomes
from tests.support.traffic import Traffic
from tests.support.wait import wait_until

THREADS = 4
MAX_REQUESTS = 2_000  # per thread; the test stops the traffic long before


def readiness(gateway: Gateway) -> str:
    response = httpx.get(gateway.url + "/readyz")
    assert response.status_code == 200  # degraded is still ready to serve
    status: str = response.json()["status"]
    return status


def store_state(gateway: Gateway) -> dict[str, object]:
    state: dict[str, object] = httpx.get(gateway.url + "/v1/gateway/stats").json()["store"]
    return state


def test_redis_killed_and_restarted_during_traffic(
    fakes: Fakes, start_gateway: Callable[..., Gateway], own_redis: RedisServer, prefix: str
) -> None:
    fake = fakes.start("steady", FakeBehavior(output_tokens=8))
    stats = {
        "backend": "redis",
        "redis_url": own_redis.url,
        "key_prefix": prefix,
        "flush_interval_s": 0.05,
        "refresh_interval_s": 0.1,
        "redis_timeout_s": 0.5,
    }
    gateway = start_gateway(gateway_config([fake], extra={"stats": stats}))
    assert readiness(gateway) == "ready"

    with Traffic([gateway.base_url]) as traffic:
        wait_until(traffic.served_more_than(20), timeout=15, what="traffic before the outage")
        own_redis.stop()
        recorded_at_kill = len(gateway.samples.samples)
        # Degraded as soon as any store sees Redis gone (the budgets' store may be first); the stats store's
        # reason joins it when its own next write fails.
        wait_until(lambda: readiness(gateway) == "degraded", timeout=15, what="/readyz to report degraded")
        wait_until(
            lambda: any(
                "redis at redis://127.0.0.1" in r for r in httpx.get(gateway.url + "/readyz").json()["reasons"]
            ),
            timeout=15,
            what="/readyz to name the stats store's Redis",
        )
        served = traffic.ok
        wait_until(traffic.served_more_than(served + 40), timeout=15, what="traffic during the outage")
        assert store_state(gateway)["buffered_samples"] != 0

        own_redis.start()
        wait_until(lambda: readiness(gateway) == "ready", timeout=15, what="/readyz to report ready again")
        served = traffic.ok
        wait_until(traffic.served_more_than(served + 20), timeout=15, what="traffic after the outage")

    assert traffic.failures == []
    wait_until(
        lambda: len(gateway.samples.samples) == traffic.ok, timeout=15, what="the gateway to record every answer"
    )
    wait_until(lambda: store_state(gateway)["buffered_samples"] == 0, timeout=15, what="the buffer to drain")
    assert store_state(gateway)["dropped_samples"] == 0
    total = len(gateway.samples.samples)
    # Redis restarted empty: it holds at least every sample recorded since the kill, held through
    # the outage and flushed after; at most all of them (those flushed before the kill were lost).
    wait_until(
        lambda: total_outcomes(own_redis.client(), prefix) >= total - recorded_at_kill, timeout=15, what="the flush"
    )
    assert total - recorded_at_kill <= total_outcomes(own_redis.client(), prefix) <= total


def test_a_gateway_started_while_redis_is_down_stays_degraded_until_it_is_up(
    fakes: Fakes,
    start_gateway: Callable[..., Gateway],
    own_redis: RedisServer,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With nothing to write, a flush makes no round trip: it must not count as Redis being back, or an idle
    gateway's stats flip between degraded and healthy, and warn again, all through an outage."""
    fake = fakes.start("steady", FakeBehavior(output_tokens=8))
    stats = {"backend": "redis", "redis_url": own_redis.url, "key_prefix": prefix, "redis_timeout_s": 0.5}
    stats |= {"flush_interval_s": 0.05, "redis_backoff_min_s": 0.05, "redis_backoff_max_s": 0.2}
    own_redis.stop()
    with caplog.at_level(logging.INFO, logger="gateway.stats"):
        gateway = start_gateway(gateway_config([fake], extra={"stats": stats}))
        store = gateway.runtime.stats
        assert isinstance(store, RedisStatsStore)
        # Each failed try grows the count; a flush taken for a success would reset it.
        wait_until(lambda: store.backoff.failures >= 5, timeout=30, what="five failed tries in a row")
        assert readiness(gateway) == "degraded"
        said = [r.getMessage() for r in caplog.records if r.name == "gateway.stats"]
        assert len(said) == 1 and "serving local samples" in said[0], said
        own_redis.start()
        wait_until(lambda: readiness(gateway) == "ready", timeout=30, what="/readyz to report ready")
