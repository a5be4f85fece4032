"""One model's trouble stays with its deployment, over real loopback servers: a provider serving two models
learns a concurrency limit and honours a ``Retry-After`` per model, so a 503, a silent stream or a
Retry-After on model A leaves a lone model B on the same provider answered at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from gateway.config import GatewayConfig, parse_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]


def two_models(provider: FakeServer, policy: dict[str, Any] | None = None) -> GatewayConfig:
    """Models ``a`` and ``b``, each with its only deployment on ``provider`` (no ceiling: limits are learned)."""
    data: dict[str, Any] = {
        "providers": [{"name": provider.name, "base_url": provider.base_url}],
        "models": [
            {"name": name, "deployments": [{"provider": provider.name, "model": f"{name}-upstream"}]}
            for name in ("a", "b")
        ],
    }
    if policy is not None:
        data["policies"] = {"test": policy}
        for model in data["models"]:
            model["policy"] = "test"
    return parse_config(data, source="test.toml")


def body(model: str, **fake: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True, "fake": fake}


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


def test_a_503_and_a_silent_stream_on_model_a_leave_model_b_answered_at_once(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    shared = fakes.start("shared")
    gateway = start_gateway(two_models(shared))

    async def scenario() -> tuple[httpx.Response, httpx.Response, float]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as client:
            refused = await client.post("/v1/chat/completions", json=body("a", status=503, retry_after=None))
            silent = asyncio.ensure_future(client.post("/v1/chat/completions", json=body("a", hang_s=30)))
            await until(lambda: shared.app.state.in_flight == 1)
            started = time.monotonic()
            answered = await client.post("/v1/chat/completions", json=body("b"))
            took = time.monotonic() - started
            silent.cancel()
            return refused, answered, took

    refused, answered, took = asyncio.run(scenario())
    assert refused.status_code == 503
    assert answered.status_code == 200 and answered.headers["x-gateway-provider"] == "shared"
    assert took < 2.0  # not after a queue's 5 s wait: model a's slot is not model b's


def test_a_retry_after_on_model_a_leaves_model_b_unaffected(fakes: Fakes, start_gateway: StartGateway) -> None:
    shared = fakes.start("shared")
    gateway = start_gateway(two_models(shared, policy={"extends": "fixed-order", "max_attempts": 1}))
    with httpx.Client(base_url=gateway.url, timeout=20) as client:
        limited = client.post("/v1/chat/completions", json=body("a", status=429, retry_after="30"))
        started = time.monotonic()
        answered = client.post("/v1/chat/completions", json=body("b"))
        took = time.monotonic() - started
        again = client.post("/v1/chat/completions", json=body("a"))
    assert limited.status_code == 429
    assert answered.status_code == 200 and answered.headers["x-gateway-provider"] == "shared" and took < 2.0
    assert again.status_code == 429  # model a's own block stands: 30 s, as its provider asked
    assert shared.app.state.requests == 2  # a's second request was never sent


def test_a_lone_deployments_first_429_is_retried_whatever_another_model_was_told(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Failover Bench's S01 after an earlier scenario on the same provider: nothing measured, one deployment."""
    shared = fakes.start("shared")
    gateway = start_gateway(two_models(shared))
    with httpx.Client(base_url=gateway.url, timeout=20) as client:
        # (its client's deadline is shorter than the wait: model a's request is not retried)
        limited = body("a", status=429, retry_after="30")
        earlier = client.post("/v1/chat/completions", json=limited, headers={"x-request-timeout": "1"})
        started = time.monotonic()
        retried = client.post("/v1/chat/completions", json=body("b", status=429, retry_after="2", fail_first=2))
        took = time.monotonic() - started
    assert earlier.status_code == 429
    assert retried.status_code == 200 and retried.headers["x-gateway-attempts"] == "2"
    assert 1.9 <= took < 4.0  # its own Retry-After, not model a's 30 s
