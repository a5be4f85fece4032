"""A client that hangs up at each point of a request's life, over real loopback servers: while a whole answer is
awaited, after the stream's headers, after its first token, mid-answer, while a fallback's attempt waits for its
first token, and while a broken stream's recovery does. Each time the upstream request is closed within a moment,
the deployment's slot and the in-flight gauge are freed, the attempt is recorded as ``client_cancelled`` (and the
access log line says so), and nothing is left for asyncio to complain of (no exception never retrieved, no task
destroyed pending) nor a traceback in the log."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
ROUNDS = 5
PROMPTLY_S = 1.0
"""From the client's hang-up to the upstream request closed: a moment, not the attempt's timeouts (30 s here)."""
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@dataclass(frozen=True)
class Point:
    """Where the client hangs up: ``chunks`` read first (-1: a whole answer awaited, none read), on a gateway whose
    first provider behaves as ``first`` and second (if any) as ``second``."""

    chunks: int
    first: FakeBehavior
    second: FakeBehavior | None = None
    policy: tuple[tuple[str, object], ...] = ()
    recovers: bool = False


SILENT = FakeBehavior(ttft_s=30)
LONG = FakeBehavior(output_tokens=5_000, tokens_per_s=100)
POINTS = {
    "awaiting_a_whole_answer": Point(-1, SILENT),
    "after_the_headers": Point(0, SILENT, policy=(("first_byte_keepalive_s", 0.05),)),
    "after_the_first_token": Point(2, LONG),
    "mid_answer": Point(40, LONG),
    "during_a_fallback": Point(-1, FakeBehavior(status=503), SILENT),
    "during_a_fallback_streamed": Point(0, FakeBehavior(status=503), SILENT, (("first_byte_keepalive_s", 0.05),)),
    "during_a_recovery": Point(8, FakeBehavior(drop_after=6, output_tokens=50), SILENT, recovers=True),
}


def _upstream_open(fakes: list[FakeServer]) -> int:
    return sum(fake.app.state.in_flight + fake.app.state.open_streams for fake in fakes)


async def _until(condition: Callable[[], bool], timeout: float = 10) -> float:
    """Wait, within ``timeout``, for state a server's thread changes; the time it took."""
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)
    return time.monotonic() - started


async def _hang_up(client: httpx.AsyncClient, point: Point, waiting: Callable[[], bool]) -> None:
    """Send one request and hang up at ``point`` (for ``chunks`` -1 or 0: once ``waiting()`` says the last attempt
    is under way upstream)."""
    body = {**CHAT, "stream": point.chunks >= 0}
    if point.chunks < 0:
        request = asyncio.ensure_future(client.post("/v1/chat/completions", json=body))
        await _until(waiting)
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
        return
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        if point.chunks == 0:
            await _until(waiting)
            return  # leaving the block closes the connection
        # Held, not left in a loop: an async generator dropped mid-way is closed, and the response with it.
        lines = cast(AsyncGenerator[str, None], response.aiter_lines())
        for _ in range(point.chunks):  # lines: an event's and the blank one after it
            assert (await anext(lines)) != "data: [DONE]"  # the answer had not ended: the hang-up came mid-stream
        if point.recovers:
            await _until(waiting)
        await lines.aclose()


@pytest.mark.parametrize("name", list(POINTS))
def test_a_hang_up_closes_the_upstream_frees_the_slot_and_is_recorded_once(
    name: str, fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    point = POINTS[name]
    caplog.set_level(logging.INFO)
    upstreams = [fakes.start("a", point.first, record=False)]
    if point.second is not None:
        upstreams.append(fakes.start("b", point.second, record=False))
    deployments = {"b": {"continue_prefill": True}} if point.recovers else None
    policy = {"first_token_timeout_s": 30.0, "idle_timeout_s": 30.0, **dict(point.policy)}
    gateway = start_gateway(gateway_config(upstreams, policy=policy, deployments=deployments))
    last = upstreams[-1]
    router = gateway.runtime.router

    def waiting() -> bool:
        """The request's last attempt is under way upstream."""
        return last.app.state.in_flight == 1

    async def scenario() -> list[float]:
        took = []
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30, limits=limits) as client:
            for _ in range(ROUNDS):
                await _hang_up(client, point, waiting)
                took.append(await _until(lambda: _upstream_open(upstreams) == 0))
                await _until(lambda: sum(router.in_flight("m", fake.name) for fake in upstreams) == 0)
        return took

    took = asyncio.run(scenario())
    assert max(took) < PROMPTLY_S, took

    lines = access_lines(caplog, ROUNDS)
    assert len(lines) == ROUNDS
    assert {line["outcome"] for line in lines} == {"client_cancelled"}, lines
    last_attempts = [s for s in gateway.samples.samples if s.deployment == last.name]
    assert len(last_attempts) == ROUNDS and {s.outcome for s in last_attempts} == {"client_cancelled"}
    gauge = gateway.metrics.registry.get_sample_value
    assert [gauge("gateway_inflight_requests", {"provider": fake.name}) for fake in upstreams] == [0] * len(upstreams)
    assert last.app.state.completed == 0

    gc.collect()  # asyncio speaks of a dropped task or future when it is collected
    said = [r for r in caplog.records if r.name != "gateway.access" and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in said if "never retrieved" in r.getMessage() or "pending" in r.getMessage()] == []
    assert [(r.name, r.getMessage()) for r in said if r.exc_info] == []
