"""The attempt loop: a failure before any byte reached the client moves on to the next deployment,
within the policy's attempt count and total deadline; every attempt leaves one Sample."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
SHORT = {"first_token_timeout_s": 0.25, "idle_timeout_s": 0.25, "connect_timeout_s": 1.0}


def ask(gateway: Gateway, stream: bool, fake: dict[str, Any] | None = None) -> tuple[str, Mapping[str, str]]:
    """The answer text and headers, through the SDK."""
    client = sdk(gateway.base_url)
    extra = {"fake": fake} if fake else None
    if stream:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES, stream=True, extra_body=extra
        )
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        return text, raw.headers
    whole = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, extra_body=extra)
    return whole.parse().choices[0].message.content or "", whole.headers


def outcomes(gateway: Gateway, count: int) -> list[tuple[str, str, int | None]]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    assert len(gateway.samples.samples) == count
    return [(s.provider, s.outcome, s.status) for s in gateway.samples.samples]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("behavior", "outcome", "status"),
    [
        (FakeBehavior(status=500), "upstream_error", 500),
        (FakeBehavior(status=503), "upstream_error", 503),
        (FakeBehavior(status=429, retry_after="1"), "upstream_error", 429),
        (FakeBehavior(status=401), "upstream_error", 401),  # the provider's key is wrong: not the client's fault
        (FakeBehavior(hang_s=30), "timeout", None),
    ],
    ids=["500", "503", "429", "401", "hang-before-headers"],
)
def test_failed_first_attempt_falls_back(
    fakes: Fakes, start_gateway: StartGateway, stream: bool, behavior: FakeBehavior, outcome: str, status: int | None
) -> None:
    first, second = fakes.start("a", behavior), fakes.start("b", FakeBehavior(output_tokens=5))
    gateway = start_gateway(gateway_config([first, second], policy=SHORT))
    text, headers = ask(gateway, stream)
    assert text == " the quick brown fox jumps"
    assert (headers["x-gateway-provider"], headers["x-gateway-attempts"], headers["x-gateway-route"]) == (
        "b",
        "2",
        "fallback",
    )
    assert outcomes(gateway, 2) == [("a", outcome, status), ("b", "ok", 200)]
    # A hung attempt is dropped, not left running upstream.
    wait_until(lambda: first.app.state.open_streams == 0, what="no open stream at a")


@pytest.mark.parametrize("stream", [False, True])
def test_connection_refused_falls_back(fakes: Fakes, start_gateway: StartGateway, stream: bool) -> None:
    first, second = fakes.start("a"), fakes.start("b")
    gateway = start_gateway(gateway_config([first, second], policy=SHORT))
    first.server.stop()
    text, headers = ask(gateway, stream)
    assert text and headers["x-gateway-provider"] == "b"
    assert outcomes(gateway, 2) == [("a", "upstream_error", None), ("b", "ok", 200)]


def test_first_token_timeout_falls_back_and_cancels(fakes: Fakes, start_gateway: StartGateway) -> None:
    first, second = fakes.start("a", FakeBehavior(ttft_s=30)), fakes.start("b")
    gateway = start_gateway(gateway_config([first, second], policy=SHORT))
    text, headers = ask(gateway, True)
    assert text and headers["x-gateway-provider"] == "b"
    assert outcomes(gateway, 2) == [("a", "timeout", 200), ("b", "ok", 200)]
    wait_until(lambda: first.app.state.open_streams == 0, what="a's stream closed")
    assert first.app.state.cancelled == 1


def test_stream_that_ends_before_any_output_falls_back(fakes: Fakes, start_gateway: StartGateway) -> None:
    first, second = fakes.start("a", FakeBehavior(drop_after=0)), fakes.start("b")
    gateway = start_gateway(gateway_config([first, second], policy=SHORT))
    text, headers = ask(gateway, True)
    assert text and headers["x-gateway-provider"] == "b"
    assert outcomes(gateway, 2) == [("a", "broken_stream", 200), ("b", "ok", 200)]


def test_idle_gap_before_first_token_falls_back(fakes: Fakes, start_gateway: StartGateway) -> None:
    """A role chunk, then nothing: the idle timeout ends the attempt before the first-token one."""
    first, second = fakes.start("a", FakeBehavior(ttft_s=30)), fakes.start("b")
    policy = {"first_token_timeout_s": 5.0, "idle_timeout_s": 0.2}
    gateway = start_gateway(gateway_config([first, second], policy=policy))
    text, headers = ask(gateway, True)
    assert text and headers["x-gateway-provider"] == "b"
    assert outcomes(gateway, 2) == [("a", "timeout", 200), ("b", "ok", 200)]


def test_attempts_are_bounded_by_max_attempts(fakes: Fakes, start_gateway: StartGateway) -> None:
    servers = [fakes.start(name, FakeBehavior(status=500)) for name in ("a", "b", "c")]
    gateway = start_gateway(gateway_config(servers, policy={**SHORT, "max_attempts": 2}))
    response = httpx.post(gateway.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert response.status_code == 502
    assert response.json()["error"]["message"].startswith("no provider could answer (2 attempts)")
    assert [s.app.state.requests for s in servers] == [1, 1, 0]
    assert [o[0] for o in outcomes(gateway, 2)] == ["a", "b"]


def test_attempts_are_bounded_by_the_total_deadline(fakes: Fakes, start_gateway: StartGateway) -> None:
    servers = [fakes.start(name, FakeBehavior(hang_s=30)) for name in ("a", "b")] + [fakes.start("c")]
    policy = {"first_token_timeout_s": 0.3, "total_timeout_s": 0.45}
    gateway = start_gateway(gateway_config(servers, policy=policy))
    started = time.monotonic()
    response = httpx.post(
        gateway.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert servers[2].app.state.requests == 0  # the deadline had passed: c was never tried
    assert elapsed < 10  # far below the 30 s hangs: the deadline, not the upstream, ended it
    assert outcomes(gateway, 2) == [("a", "timeout", None), ("b", "timeout", None)]


def test_total_deadline_bounds_a_non_streamed_attempt(fakes: Fakes, start_gateway: StartGateway) -> None:
    first = fakes.start("a", FakeBehavior(ttft_s=30))
    policy = {"first_token_timeout_s": 5.0, "idle_timeout_s": 5.0, "total_timeout_s": 0.3}
    gateway = start_gateway(gateway_config([first], policy=policy))
    response = httpx.post(gateway.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert response.status_code == 504, response.text
    assert outcomes(gateway, 1) == [("a", "timeout", None)]
    wait_until(lambda: first.app.state.cancelled == 1, what="a's request cancelled")


def test_rate_limited_then_served(fakes: Fakes, start_gateway: StartGateway) -> None:
    first = fakes.start("a", FakeBehavior(status=429, retry_after="30"))
    second = fakes.start("b", FakeBehavior(status=429))
    third = fakes.start("c")
    gateway = start_gateway(gateway_config([first, second, third], policy=SHORT))
    text, headers = ask(gateway, True)
    assert text and headers["x-gateway-provider"] == "c" and headers["x-gateway-attempts"] == "3"
    assert [o[2] for o in outcomes(gateway, 3)] == [429, 429, 200]
