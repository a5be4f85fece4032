"""Bursts and capacity, over real loopback servers: a request that finds every provider full waits,
bounded, for a slot; a full provider overflows to the next with room; each provider's real limit
is learned from its refusals; and a provider that says it is out is left alone until its reset."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
HOLD = {**BODY, "fake": {"hang_s": 30}}
"""A request that holds its slot until its client hangs up (the fake answers nothing for 30 s)."""


def gauge(gateway: Gateway, name: str, **labels: str) -> float | None:
    return gateway.metrics.registry.get_sample_value(name, labels)


async def burst(url: str, clients: int, each: int, body: dict[str, Any]) -> list[tuple[int, str]]:
    """``clients`` concurrent streaming clients, ``each`` requests one after another; (status, route) of each.

    A connection per request: on this busy a machine a kept-alive connection can sit in the pool past
    the server's keep-alive timeout and be closed as it is reused, an error of the test's client.
    """
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:

        async def client() -> list[tuple[int, str]]:
            results = []
            for _ in range(each):
                async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                    await response.aread()
                    results.append((response.status_code, response.headers.get("x-gateway-route", "")))
            return results

        done = await asyncio.gather(*(client() for _ in range(clients)))
    return [result for results in done for result in results]


def test_256_clients_on_a_provider_capped_at_64_all_get_answers(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(ttft_s=0.2, output_tokens=4), record=False)
    gateway = start_gateway(gateway_config([fake], max_concurrency=64))
    results = asyncio.run(burst(gateway.url, clients=256, each=1, body=BODY))
    assert Counter(status for status, _ in results) == {200: 256}
    assert 48 <= fake.app.state.max_in_flight <= 64  # the ceiling was used, and never passed
    waits = gauge(gateway, "gateway_queue_wait_seconds_count", model="m")
    assert waits is not None and waits > 0  # the burst waited for its slots
    assert gauge(gateway, "gateway_queue_refusals_total", model="m", reason="timeout") == 0
    assert gauge(gateway, "gateway_queue_depth", model="m") == 0


async def until(condition: Callable[[], bool]) -> None:
    """Wait, within a deadline, for the gateway's or a fake's state (both run in other threads)."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


def test_a_full_provider_overflows_to_the_next_with_room(fakes: Fakes, start_gateway: StartGateway) -> None:
    first, second = fakes.start("a"), fakes.start("b")
    gateway = start_gateway(gateway_config([first, second], provider_options={"a": {"max_concurrency": 1}}))

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
            holder = asyncio.ensure_future(client.post("/v1/chat/completions", json=HOLD))
            await until(lambda: first.app.state.in_flight == 1)
            response = await client.post("/v1/chat/completions", json=BODY)
            holder.cancel()
            return response

    response = asyncio.run(scenario())
    assert response.status_code == 200
    assert response.headers["x-gateway-provider"] == "b"
    assert response.headers["x-gateway-route"] == "overflow"
    assert response.headers["x-gateway-attempts"] == "1"
    assert first.app.state.requests == 1


def test_the_bounds_answer_429_with_retry_after(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway")
    fake = fakes.start("a")
    policy = {"queue_timeout_s": 0.3, "queue_max_length": 1}
    gateway = start_gateway(
        gateway_config([fake], max_concurrency=1, policy=policy, provider_options={"a": {"apis": ["chat", "messages"]}})
    )

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
            holder = asyncio.ensure_future(client.post("/v1/chat/completions", json=HOLD))
            await until(lambda: fake.app.state.in_flight == 1)
            waiter = asyncio.ensure_future(client.post("/v1/chat/completions", json=BODY))
            await until(lambda: gauge(gateway, "gateway_queue_depth", model="m") == 1)
            full = await client.post("/v1/chat/completions", json=BODY)
            body = {"model": "m", "max_tokens": 8, "messages": BODY["messages"]}
            anthropic = await client.post("/v1/messages", json=body)
            timed_out = await waiter
            holder.cancel()
            return timed_out, full, anthropic

    timed_out, full, anthropic = asyncio.run(scenario())
    assert (timed_out.status_code, timed_out.json()["error"]["code"]) == (429, "capacity_wait_timeout")
    assert int(timed_out.headers["retry-after"]) >= 1
    assert (full.status_code, full.json()["error"]["code"]) == (429, "capacity_queue_full")
    assert int(full.headers["retry-after"]) >= 1
    assert "at its concurrency limit" in full.json()["error"]["message"]
    assert "its queue is full" in full.json()["error"]["message"]  # refused at once: it waited for no slot
    assert "no slot freed in time" in timed_out.json()["error"]["message"]
    assert anthropic.status_code == 429 and anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "rate_limit_error" and "retry-after" in anthropic.headers
    assert fake.app.state.requests == 1  # nothing past the ceiling reached the provider
    assert gauge(gateway, "gateway_queue_refusals_total", model="m", reason="timeout") == 1
    assert gauge(gateway, "gateway_queue_refusals_total", model="m", reason="full") == 2
    # Said in the log, once for the burst (the next line, 10 s on, would count the others).
    (line,) = [r.getMessage() for r in caplog.records if "refused for capacity" in r.getMessage()]
    assert "every deployment of model 'm' is at its concurrency limit (a)" in line


def test_a_client_that_hangs_up_while_queued_frees_its_place(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=4))
    gateway = start_gateway(gateway_config([fake], max_concurrency=1, policy={"queue_max_length": 1}))

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
            holder = asyncio.ensure_future(client.post("/v1/chat/completions", json=HOLD))
            await until(lambda: fake.app.state.in_flight == 1)
            quitter = asyncio.ensure_future(client.post("/v1/chat/completions", json=BODY))
            await until(lambda: gauge(gateway, "gateway_queue_depth", model="m") == 1)
            quitter.cancel()  # hangs up while it waits
            await until(lambda: gauge(gateway, "gateway_queue_depth", model="m") == 0)
            # Its place is free: the next joins the line (a full line would refuse it at once) ...
            stayer = asyncio.ensure_future(client.post("/v1/chat/completions", json=BODY))
            await until(lambda: gauge(gateway, "gateway_queue_depth", model="m") == 1)
            holder.cancel()  # ... and gets the slot the moment it frees
            return await stayer

    response = asyncio.run(scenario())
    assert response.status_code == 200 and response.headers["x-gateway-provider"] == "a"
    assert gauge(gateway, "gateway_queue_refusals_total", model="m", reason="full") == 0
    assert fake.app.state.requests == 2  # the holder and the one that stayed; the quitter never reached it


def test_a_provider_that_refuses_above_40_is_learned_and_the_rest_overflows(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    tight = fakes.start("a", FakeBehavior(ttft_s=0.2, output_tokens=2, slots=40, over_slots="reject"), record=False)
    roomy = fakes.start("b", FakeBehavior(ttft_s=0.2, output_tokens=2), record=False)
    # a's ceiling says 100 (as a provider's docs might): it refuses above 40, and that is what is learned.
    gateway = start_gateway(
        gateway_config([tight, roomy], max_concurrency=None, provider_options={"a": {"max_concurrency": 100}})
    )
    learning = asyncio.run(burst(gateway.url, clients=80, each=3, body=BODY))
    state = tight.app.state
    refused, asked, elsewhere = state.refused, state.requests, roomy.app.state.requests
    assert refused > 0  # it pushed back while its limit was found ...
    settled = asyncio.run(burst(gateway.url, clients=80, each=3, body=BODY))
    assert Counter(status for status, _ in learning + settled) == {200: 480}  # every refusal went elsewhere
    # ... and far less once it was learned (about 40% of a's requests while learning, 9-14% after, measured):
    # the additive increase re-probes the limit every round, which is how a provider that loosens is found.
    assert state.refused - refused < 0.2 * (state.requests - asked)
    assert roomy.app.state.requests - elsewhere > 20  # past a's learned limit, b took the rest
    assert httpx.get(gateway.url + "/metrics").status_code == 200  # the scrape sets the provider gauges
    limit = gauge(gateway, "gateway_provider_concurrency_limit", provider="a")
    # Learned from the refusals, not the ceiling's 100 nor the 80 offered (the gateway's count includes
    # requests on their way). Read at one instant: a busy machine backs it off a round or two more, and the
    # additive increase climbs past 40 in the rounds since the last refusal (65 was read once in a loaded CI run).
    assert limit is not None and 24 <= limit < 80
    # Its circuit stayed closed: a refusal that reports budget left is about load, not health.
    assert gauge(gateway, "gateway_circuit_state", provider="a", state="open") == 0


def test_a_provider_out_of_budget_is_left_alone_until_its_reset(fakes: Fakes, start_gateway: StartGateway) -> None:
    spent = fakes.start("a", FakeBehavior(ratelimit_remaining=0, ratelimit_reset="30s"))
    backup = fakes.start("b", FakeBehavior(output_tokens=2))
    gateway = start_gateway(gateway_config([spent, backup], policy={"cooldown_s": 0.05}))
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        first = http.post("/v1/chat/completions", json=BODY)
        assert (first.headers["x-gateway-provider"], first.headers["x-gateway-attempts"]) == ("b", "2")
        for _ in range(5):
            response = http.post("/v1/chat/completions", json=BODY)
            assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "1")
        assert http.get("/metrics").status_code == 200  # the scrape sets the provider gauges
        (ranking,) = http.get("/v1/gateway/routes").json()["data"]  # loopback, no keys: allowed
    explained = {row["deployment"]: row for row in ranking["deployments"]}
    assert explained["a"]["status"] == "rate limited" and explained["a"]["full"]
    assert explained["a"]["rate_limit"]["remaining_requests"] == 0
    assert 25 < explained["a"]["rate_limit"]["out_for_s"] <= 30
    assert explained["b"]["concurrency_limit"] == 256 and not explained["b"]["full"]
    assert spent.app.state.requests == 1  # long past the circuit's cool-down: the provider said 30 s
    reset = gauge(gateway, "gateway_provider_ratelimit_reset_seconds", provider="a")
    assert gauge(gateway, "gateway_provider_ratelimit_remaining", provider="a", kind="requests") == 0
    assert reset is not None and 25 < reset <= 30


def test_a_client_deadline_bounds_the_wait_and_the_attempt(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake], max_concurrency=1, policy={"queue_timeout_s": 5}))

    async def scenario() -> list[tuple[httpx.Response, float]]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
            holder = asyncio.ensure_future(client.post("/v1/chat/completions", json=HOLD))
            await until(lambda: fake.app.state.in_flight == 1)
            answers = []
            for headers, body in (
                ({"x-request-timeout": "0.3"}, BODY),
                ({"x-slo-ttft-ms": "300"}, BODY),
                ({}, {**BODY, "provider": {"preferred_max_latency": 0.3}}),
            ):
                started = time.monotonic()
                response = await client.post("/v1/chat/completions", json=body, headers=headers)
                answers.append((response, time.monotonic() - started))
            holder.cancel()
            await until(lambda: fake.app.state.in_flight == 0)
            started = time.monotonic()
            hung = await client.post(
                "/v1/chat/completions", json={**BODY, "fake": {"hang_s": 5}}, headers={"x-request-timeout": "0.3"}
            )
            answers.append((hung, time.monotonic() - started))
            return answers

    *waited, (hung, hung_s) = asyncio.run(scenario())
    for response, seconds in waited:  # not the policy's 5 s: the client's own bound
        assert (response.status_code, response.json()["error"]["code"]) == (429, "capacity_wait_timeout")
        assert 0.3 <= seconds < 2.5
    assert hung.status_code == 504 and 0.3 <= hung_s < 2.5  # the attempt, too, ends at the client's deadline


def test_a_malformed_deadline_header_is_the_clients_mistake(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a")]))
    for header, value in (("x-request-timeout", "soon"), ("x-slo-ttft-ms", "-5"), ("x-request-timeout", "nan")):
        response = httpx.post(gateway.base_url + "/chat/completions", json=BODY, headers={header: value})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == header
