"""What an operator sees while Redis goes away under traffic, as ``backend = "redis"`` with every Redis user on
(stats, session bindings, a key's rate limit): requests keep being served, the log says it once per
user and then stays quiet (no traceback, however many retries), then one line each when Redis is back; the stats
and metrics endpoints answer throughout; the samples held meanwhile reach Redis. And a Redis that accepts
connections but never answers (SIGSTOP): no request waits on it, no endpoint waits past the Redis timeout."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.fakes import FakeBehavior
from gateway.stats.redis_store import RedisStatsStore
from tests.redis_server import RedisServer
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.stats import total_outcomes
from tests.support.traffic import Traffic
from tests.support.wait import wait_until

pytestmark = pytest.mark.timeout(120)

KEY = "sk-gw-outage-0123456789"
BUDGETED = "sk-gw-outage-budgeted-0123"
REDIS_TIMEOUT_S = 1.0
"""Long enough that a request or an endpoint waiting on the hung Redis would show in its time."""
REQUEST_TIMEOUT_S = 0.3
"""The bound of the request path's own Redis calls (a budget's reservation: a connection, then the call)."""


@pytest.fixture
def outage_gateway(
    fakes: Fakes, start_gateway: Callable[..., Gateway], own_redis: RedisServer, prefix: str, tmp_path: Path
) -> Iterator[Gateway]:
    fake = fakes.start("steady", FakeBehavior(output_tokens=8))
    keys = tmp_path / "keys.toml"
    # The traffic's key has no budget: a budget is refused while Redis is down (docs/security.md), by design.
    keys.write_text(
        f'[[keys]]\nname = "ops"\nkey = "{KEY}"\nrequests_per_minute = 100000\n\n'
        f'[[keys]]\nname = "budgeted"\nkey = "{BUDGETED}"\nbudget_usd = 100.0\n'
    )
    stats: dict[str, Any] = {"backend": "redis", "redis_url": own_redis.url, "key_prefix": prefix}
    stats |= {"flush_interval_s": 0.05, "refresh_interval_s": 0.1, "redis_timeout_s": REDIS_TIMEOUT_S}
    # Many retries in an outage, each a chance to log.
    stats |= {"redis_backoff_min_s": 0.05, "redis_backoff_max_s": 0.2, "redis_request_timeout_s": REQUEST_TIMEOUT_S}
    extra = {"stats": stats, "auth": {"api_keys_file": str(keys)}}
    yield start_gateway(gateway_config([fake], extra=extra))


def _timed(gateway: Gateway, path: str) -> float:
    started = time.monotonic()
    headers = {"authorization": f"Bearer {KEY}"}
    response = httpx.get(gateway.url + path, headers=headers, timeout=10)
    assert response.status_code == 200, (path, response.text[:300])
    return time.monotonic() - started


def _readiness(gateway: Gateway) -> str:
    status: str = httpx.get(gateway.url + "/readyz", timeout=10).json()["status"]
    return status


def _said(caplog: pytest.LogCaptureFixture, since: int) -> list[logging.LogRecord]:
    """What the gateway (and asyncio, for a task's exception never retrieved) logged since ``since``, bar access."""
    logged = caplog.records[since:]
    return [r for r in logged if r.name.startswith(("gateway", "asyncio")) and r.name != "gateway.access"]


def test_redis_gone_and_back_under_traffic_says_it_once_and_serves_throughout(
    outage_gateway: Gateway, own_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = outage_gateway
    store = gateway.runtime.stats
    assert isinstance(store, RedisStatsStore)
    caplog.set_level(logging.INFO)
    with Traffic([gateway.base_url], api_key=KEY) as traffic:
        traffic.keep_going(20, "traffic before the outage")
        assert _readiness(gateway) == "ready"
        own_redis.stop()
        gone = len(caplog.records)
        recorded_at_kill = len(gateway.samples.samples)
        wait_until(lambda: _readiness(gateway) == "degraded", timeout=15, what="/readyz to report degraded")
        # Many failed tries, and traffic all the while: each a chance for the log to say it again.
        wait_until(lambda: store.backoff.failures >= 20, timeout=30, what="twenty failed tries in a row")
        traffic.keep_going(60, "traffic during the outage")
        for path in ("/v1/gateway/stats", "/metrics", "/readyz"):
            assert _timed(gateway, path) < REDIS_TIMEOUT_S, path
        during = _said(caplog, gone)

        back = len(caplog.records)
        own_redis.start()
        wait_until(lambda: _readiness(gateway) == "ready", timeout=15, what="/readyz to report ready again")
        traffic.keep_going(40, "traffic after the outage")
        wait_until(lambda: store.backoff.failures == 0, timeout=15, what="the stats store back")
        after = _said(caplog, back)

    assert traffic.failures == []
    assert [r for r in during + after if r.exc_info or "Traceback" in r.getMessage()] == []
    assert [r.getMessage() for r in during + after if "never retrieved" in r.getMessage()] == []
    assert all(r.levelno == logging.WARNING for r in during), [(r.name, r.getMessage()) for r in during]
    # One warning per Redis user (stats, bindings, rate limits), however many retries failed ...
    users = [r.getMessage().split(":")[0] for r in during]
    assert len(users) == len(set(users)) and 1 <= len(users) <= 3, users
    assert any("serving local samples" in r.getMessage() for r in during), users
    # ... and one line each when it is back (none warns again).
    assert all(r.levelno == logging.INFO and "again" in r.getMessage() for r in after), [r.getMessage() for r in after]
    returned = [r.getMessage().split(":")[0] for r in after]
    assert len(returned) == len(set(returned)) and len(returned) <= len(users), (users, returned)

    # Redis restarted empty: every sample recorded since the kill reaches it (held, then flushed).
    wait_until(lambda: len(gateway.samples.samples) == traffic.ok, timeout=15, what="every answer recorded")
    since_kill = len(gateway.samples.samples) - recorded_at_kill
    wait_until(lambda: total_outcomes(own_redis.client(), prefix) >= since_kill, timeout=15, what="the flush")


def test_a_hung_redis_delays_no_request_and_no_endpoint_past_its_timeout(
    outage_gateway: Gateway, own_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = outage_gateway
    spend = gateway.runtime.access.state.spend.store
    assert isinstance(spend, RedisSpendStore)
    assert own_redis.process is not None
    pid = own_redis.process.pid
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": "ops-session"}
    caplog.set_level(logging.INFO)
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=10) as http:

        def request() -> float:
            started = time.monotonic()
            assert http.post("/v1/chat/completions", json=body).status_code == 200
            return time.monotonic() - started

        before = [request() for _ in range(10)]
        wait_until(lambda: total_outcomes(own_redis.client(), prefix) >= 10, timeout=10, what="samples in Redis")
        os.kill(pid, signal.SIGSTOP)  # hung: connections open, nothing answered
        try:
            hung = len(caplog.records)
            during = [request() for _ in range(30)]
            for path in ("/v1/gateway/stats", "/metrics", "/readyz"):
                assert _timed(gateway, path) < REDIS_TIMEOUT_S + 0.3, path
            wait_until(lambda: _readiness(gateway) == "degraded", timeout=15, what="/readyz to report degraded")
            during += [request() for _ in range(10)]
            said = _said(caplog, hung)
            assert spend._pending  # each request's settlement, kept until Redis answers
        finally:
            os.kill(pid, signal.SIGCONT)
        # Back with no request to notice it: every Redis user asks again on its own, and writes what it kept.
        wait_until(lambda: _readiness(gateway) == "ready", timeout=15, what="/readyz to report ready again")
        wait_until(lambda: not spend._pending, timeout=15, what="the kept settlements written")
        after = [request() for _ in range(10)]

    # No request waits on Redis: not the 1 s timeout, nor the request path's own bounded calls (0.5 s).
    assert max(during) < max(before) + 0.3, (before, during)
    assert max(after) < max(before) + 0.3, (before, after)
    assert [r for r in said if r.exc_info] == []
    total = len(gateway.samples.samples)
    wait_until(lambda: total_outcomes(own_redis.client(), prefix) >= total, timeout=15, what="the held samples")


def test_a_hung_redis_refuses_a_budgeted_request_within_the_request_timeout_and_the_next_at_once(
    outage_gateway: Gateway, own_redis: RedisServer
) -> None:
    """A budget is a promise about money: with Redis hung, a budgeted key's request is refused (503
    ``budget_unavailable``), the first after waiting no longer than its bound, the next ones at once."""
    gateway = outage_gateway
    assert own_redis.process is not None
    pid = own_redis.process.pid
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {BUDGETED}"}, timeout=10) as http:

        def request() -> tuple[int, float, str]:
            started = time.monotonic()
            answer = http.post("/v1/chat/completions", json=body)
            code = answer.json()["error"]["code"] if answer.status_code != 200 else ""
            return answer.status_code, time.monotonic() - started, code

        assert request()[0] == 200
        os.kill(pid, signal.SIGSTOP)
        try:
            first, *then = [request() for _ in range(5)]
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: request()[0] == 200, timeout=15, what="budgeted requests served again")
    assert {(status, code) for status, _, code in [first, *then]} == {(503, "budget_unavailable")}
    assert first[1] < 2 * REQUEST_TIMEOUT_S + 0.3, first
    assert max(took for _, took, _ in then) < 0.2, then


def test_an_outage_with_no_budget_anywhere_neither_warns_of_refusals_nor_degrades_for_budgets(
    fakes: Fakes,
    start_gateway: Callable[..., Gateway],
    own_redis: RedisServer,
    prefix: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A keys file whose keys (and teams) have no budget: Redis going away refuses nothing, so the budgets neither
    warn that budgeted requests are refused nor give /readyz a reason; one info line says the spend records are held
    and written when Redis returns (and they are)."""
    fake = fakes.start("steady", FakeBehavior(output_tokens=8))
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[keys]]\nname = "ops"\nkey = "{KEY}"\nteam = "search"\n')
    stats: dict[str, Any] = {"backend": "redis", "redis_url": own_redis.url, "key_prefix": prefix}
    stats |= {"redis_backoff_min_s": 0.05, "redis_backoff_max_s": 0.2, "redis_request_timeout_s": REQUEST_TIMEOUT_S}
    gateway = start_gateway(gateway_config([fake], extra={"stats": stats, "auth": {"api_keys_file": str(keys)}}))
    spend = gateway.runtime.access.state.spend.store
    assert isinstance(spend, RedisSpendStore)
    caplog.set_level(logging.INFO)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {KEY}"}, timeout=10) as http:
        assert http.post("/v1/chat/completions", json=body).status_code == 200
        own_redis.stop()
        gone = len(caplog.records)
        for _ in range(3):
            assert http.post("/v1/chat/completions", json=body).status_code == 200
        wait_until(lambda: spend.kept > 0, timeout=15, what="the spend store holding what it cannot write")
        reasons: list[str] = httpx.get(gateway.url + "/readyz", timeout=10).json()["reasons"]
        said = [r for r in _said(caplog, gone) if r.name == "gateway.spending"]
        own_redis.start()
        wait_until(lambda: spend.kept == 0, timeout=15, what="the spend records written once it is back")
    assert not [reason for reason in reasons if "budget" in reason], reasons
    assert [r.levelno for r in said] == [logging.INFO], [r.getMessage() for r in said]
    assert "refused" not in said[0].getMessage() and "written when" in said[0].getMessage(), said[0].getMessage()
