"""Clients that stop waiting at the moments the rest of the suite does not reach, over real loopback servers:
while a budget reservation is on its way to Redis (``tests.support.reply_gate`` holds Redis's answer back), and
what the access log says of a client gone while queued or after the keep-alives began.

Where the other moments are tested: mid-stream and before the first token
(``test_streaming::test_client_hang_up_mid_stream_cancels_upstream``,
``test_streaming::test_client_hang_up_during_first_token_wait_cancels``), during a hedge or a cold-start race
(``test_hedging::test_a_client_gone_during_the_race_cancels_both``,
``test_drain::test_a_client_gone_during_the_race_drains_nothing``), a storm of them
(``test_faults::test_a_disconnect_storm_leaks_no_upstream_connection``), while queued
(``test_capacity::test_a_client_that_hangs_up_while_queued_frees_its_place``), and a client that stops reading
(``test_slow_reader``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.redis_server import RedisServer
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.reply_gate import ReplyGate
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
KEY = "sk-gw-budgeted-0123456789"
AUTH = {"authorization": f"Bearer {KEY}"}
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def gate(redis_server: RedisServer) -> Iterator[ReplyGate]:
    relay = ReplyGate(redis_server.port).start()
    yield relay
    relay.stop()


def budgeted_gateway(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, redis_url: str, stats: dict[str, Any]
) -> Gateway:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[keys]]\nname = "alice"\nkey = "{KEY}"\nbudget_usd = 100.0\n')
    fake = fakes.start("a", FakeBehavior(output_tokens=4), record=False)
    extra = {"auth": {"api_keys_file": str(keys)}, "stats": {"backend": "redis", "redis_url": redis_url, **stats}}
    gateway = start_gateway(gateway_config([fake], extra=extra))
    # A whole request first: the request path's Redis connection is open, its script loaded, nothing held after.
    assert httpx.post(gateway.base_url + "/chat/completions", json=CHAT, headers=AUTH, timeout=10).status_code == 200
    gateway.server.call(gateway.runtime.access.state.settled())
    return gateway


def reserved_nanos(redis_server: RedisServer) -> int:
    """What every budget holds for requests in flight, read from Redis itself (not through the gate)."""
    with redis_server.client() as client:
        hashes = [key for key in client.keys("*:budget:*") if not key.endswith(":holds")]
        return sum(int(client.hget(key, "reserved") or 0) for key in hashes)


def test_a_client_gone_while_its_reservation_is_answered_leaves_no_hold(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, redis_server: RedisServer, gate: ReplyGate
) -> None:
    gateway = budgeted_gateway(fakes, start_gateway, tmp_path, gate.url, {"redis_request_timeout_s": 10.0})
    assert reserved_nanos(redis_server) == 0
    in_flight = gateway.runtime.access.state.in_flight
    gate.hold()

    async def hang_up_during_the_reservation() -> None:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=10) as client:
            request = asyncio.ensure_future(client.post("/chat/completions", json=CHAT, headers=AUTH))
            # Redis took the hold; its answer is held back: the request still waits for it.
            await asyncio.to_thread(wait_until, lambda: reserved_nanos(redis_server) > 0, 5, "the hold taken")
            request.cancel()  # the client hangs up
            await asyncio.to_thread(wait_until, lambda: in_flight.total == 0, 5, "the request gone")

    asyncio.run(hang_up_during_the_reservation())
    gate.release()
    wait_until(lambda: reserved_nanos(redis_server) == 0, what="the hold released")


def test_a_reservation_answered_too_late_leaves_no_hold(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, redis_server: RedisServer, gate: ReplyGate
) -> None:
    gateway = budgeted_gateway(fakes, start_gateway, tmp_path, gate.url, {"redis_request_timeout_s": 0.2})
    gate.hold()
    response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, headers=AUTH, timeout=10)
    assert (response.status_code, response.json()["error"]["code"]) == (503, "budget_unavailable")
    assert reserved_nanos(redis_server) > 0  # Redis took the hold; the gateway stopped waiting for the answer
    gate.release()

    def served() -> bool:
        again = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, headers=AUTH, timeout=10)
        return again.status_code == 200

    # Budgeted requests are served again once the store retries Redis (it took the late answer for an outage) ...
    wait_until(served, what="a budgeted request served again")
    gateway.server.call(gateway.runtime.access.state.settled())
    # ... and nothing is held any more: neither that request's hold nor the one taken for the request that left.
    assert reserved_nanos(redis_server) == 0
