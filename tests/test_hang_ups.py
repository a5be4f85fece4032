"""Clients that stop waiting at the moments the rest of the suite does not reach, over real loopback servers:
while a budget reservation is on its way to Redis (``tests.support.reply_gate`` holds Redis's answer back), and
what the access log says of a client gone while queued or after the keep-alives began.

Where the other moments are tested: mid-stream and before the first token
(``test_streaming::test_client_hang_up_mid_stream_cancels_upstream``,
``test_streaming::test_client_hang_up_during_first_token_wait_cancels``), during a hedge or a cold-start race
(``test_hedging::test_a_client_gone_during_the_race_cancels_both``,
``test_drain::test_a_client_gone_during_the_race_drains_nothing``), a storm of them
(``test_faults::test_a_disconnect_storm_leaks_no_upstream_connection``), while queued
(``test_capacity::test_a_client_that_hangs_up_while_queued_frees_its_place``), a client that stops reading
(``test_slow_reader``), and each point in turn, a fallback's and a recovery's wait included (``test_hang_up_points``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.redis_server import RedisServer
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.reply_gate import ReplyGate
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
KEY = "sk-gw-budgeted-0123456789"
AUTH = {"authorization": f"Bearer {KEY}"}
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
BATCH = 20
ROUNDS = 10
"""200 hang-ups in all, 20 at a time: what would leak (a descriptor, a place in line, a hold, a slot) shows."""
HOLD_S = 120.0
"""How long the slot's holder waits for its answer: longer than any test here takes, on any machine."""


def descriptors() -> int:
    """Open descriptors of this process, where the gateway and its fakes run (each in a thread)."""
    return len(os.listdir("/proc/self/fd"))


def never_retrieved(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncio said of a task or future dropped with its exception unread, or still pending (it says so when
    one is collected: a collection first)."""
    gc.collect()
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    return [message for message in said if "never retrieved" in message or "destroyed but it is pending" in message]


def reserved_nanos_held(gateway: Gateway) -> list[int]:
    """What each budget holds for requests in flight (nano-dollars), as ``/v1/gateway/spend`` reads it."""
    access = gateway.runtime.access
    return [balance.reserved for balance in gateway.server.call(access.state.spend.balances(access.spenders()))]


def budgeted_keys(tmp_path: Path) -> str:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[keys]]\nname = "alice"\nkey = "{KEY}"\nbudget_usd = 100.0\n')
    return str(keys)


async def until(condition: Callable[[], bool]) -> None:
    """Wait, within a deadline, for state the gateway's or a fake's thread changes."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


async def hang_up_in_rounds(url: str, body: dict[str, Any], ready: Callable[[int], bool], rounds: int) -> None:
    """``rounds`` times, ``BATCH`` clients send ``body`` and, once ``ready(BATCH)`` (where they all are), hang up;
    the next round starts once ``ready(0)`` (the gateway saw them all leave)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=10, headers=AUTH, limits=limits) as client:
        for _ in range(rounds):
            requests = [asyncio.ensure_future(client.post("/chat/completions", json=body)) for _ in range(BATCH)]
            await until(lambda: ready(BATCH))
            for request in requests:
                request.cancel()
            await asyncio.gather(*requests, return_exceptions=True)
            await until(lambda: ready(0))


async def reading_first_bytes(url: str, body: dict[str, Any], rounds: int) -> None:
    """``rounds`` times, ``BATCH`` streaming clients read their first bytes and hang up."""

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", "/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for _ in response.aiter_raw():
                break  # leaving the block closes the connection

    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=10, headers=AUTH, limits=limits) as client:
        for _ in range(rounds):
            await asyncio.gather(*(one(client) for _ in range(BATCH)))


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
    fake = fakes.start("a", FakeBehavior(output_tokens=4), record=False)
    stats = {"backend": "redis", "redis_url": redis_url, **stats}
    extra = {"auth": {"api_keys_file": budgeted_keys(tmp_path)}, "stats": stats}
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


def test_200_clients_gone_while_queued_leave_nothing_and_are_each_logged_as_a_hang_up(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    fake = fakes.start("a", FakeBehavior(output_tokens=4))
    # The holder keeps the one slot for the whole test, however long a busy machine takes over the rounds.
    policy = {"queue_max_length": 1000, "queue_timeout_s": 30, "first_token_timeout_s": HOLD_S}
    extra = {"auth": {"api_keys_file": budgeted_keys(tmp_path)}}
    gateway = start_gateway(gateway_config([fake], max_concurrency=1, policy=policy, extra=extra))
    metric = gateway.metrics.registry.get_sample_value
    state = gateway.runtime.access.state

    def depth() -> float | None:
        return metric("gateway_queue_depth", {"model": "m"})

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=10, headers=AUTH) as client:
            holding = {**CHAT, "fake": {"hang_s": HOLD_S}}
            holder = asyncio.ensure_future(client.post("/chat/completions", json=holding, timeout=HOLD_S))
            await until(lambda: fake.app.state.in_flight == 1)
            await hang_up_in_rounds(gateway.base_url, CHAT, lambda n: depth() == n, 1)  # warm: sockets, pools
            await until(lambda: depth() == 0 and state.in_flight.total == 1)
            before = descriptors()
            await hang_up_in_rounds(gateway.base_url, CHAT, lambda n: depth() == n, ROUNDS)
            await until(lambda: depth() == 0 and state.in_flight.total == 1 and descriptors() == before)
            holder.cancel()

    asyncio.run(scenario())
    wait_until(lambda: state.in_flight.total == 0 and fake.app.state.in_flight == 0, what="the holder gone")
    lines = access_lines(caplog, 1 + BATCH * (ROUNDS + 1))
    quitters = [line for line in lines if line["attempts"] == 0]
    assert len(quitters) == BATCH * (ROUNDS + 1) == len(lines) - 1  # one line each
    assert {(line["status"], line["outcome"]) for line in quitters} == {(None, "client_cancelled")}
    assert fake.app.state.requests == 1  # none of them reached the provider
    assert gateway.runtime.router.in_flight("m", "a") == 0
    assert reserved_nanos_held(gateway) == [0]  # every hold released
    assert never_retrieved(caplog) == []


def test_200_clients_gone_after_the_keep_alives_began_are_logged_with_the_200_they_got(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    fake = fakes.start("a", FakeBehavior(ttft_s=30), record=False)  # silent: only keep-alives reach the client
    policy = {"first_token_timeout_s": 60, "first_byte_keepalive_s": 0.05}
    extra = {"auth": {"api_keys_file": budgeted_keys(tmp_path)}}
    gateway = start_gateway(gateway_config([fake], policy=policy, extra=extra))
    state = gateway.runtime.access.state
    body = {**CHAT, "stream": True}

    def idle() -> bool:
        return state.in_flight.total == 0 and fake.app.state.open_streams == 0

    asyncio.run(reading_first_bytes(gateway.base_url, body, 1))  # warm: sockets, pools
    wait_until(idle, what="the first round gone")
    before = descriptors()
    asyncio.run(reading_first_bytes(gateway.base_url, body, ROUNDS))
    wait_until(idle, what="every upstream request cancelled")
    wait_until(lambda: descriptors() == before, what="every connection closed")
    lines = access_lines(caplog, BATCH * (ROUNDS + 1))
    assert len(lines) == BATCH * (ROUNDS + 1) == fake.app.state.cancelled  # one line each
    assert {(line["status"], line["outcome"]) for line in lines} == {(200, "client_cancelled")}
    labels = {"model": "m", "provider": "", "status_class": "2xx"}
    assert gateway.metrics.registry.get_sample_value("gateway_requests_total", labels) == len(lines)
    assert gateway.runtime.router.in_flight("m", "a") == 0
    assert reserved_nanos_held(gateway) == [0]  # every hold released
    assert never_retrieved(caplog) == []
