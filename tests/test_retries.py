"""Retry or fail over, by measurement: faults before the first byte on real loopback servers.

A lone deployment's 500 or 429 is retried (after its ``Retry-After``); on a two-deployment model
the request goes where the prediction says: back to a much faster deployment after a short
back-off, to the other one when the wait (a ``Retry-After``) would cost more than it.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import Any

import httpx

from gateway.errors import UpstreamStatusError, UpstreamTimeout, UpstreamUnavailable
from gateway.fakes import FakeBehavior
from gateway.policies import BUILTIN_POLICIES
from gateway.relay.retry import backoff_s, retry_wait, safe_to_repeat
from gateway.routing import Candidate
from gateway.routing.deadlines import GapWindow, learn
from gateway.stats import StatsSnapshot
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.samples import samples

StartGateway = Callable[..., Gateway]
CHAT = {"model": "m", "messages": MESSAGES}
POLICY = {"extends": "fixed-order", "first_token_timeout_s": 5.0, "idle_timeout_s": 5.0}


def ask(gateway: Gateway, stream: bool = True, **extra: Any) -> httpx.Response:
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": stream, **extra}, timeout=15)
    assert response.status_code == 200, response.text
    if stream:
        assert response.content.endswith(b"data: [DONE]\n\n")
    return response


def fail_next(fake: FakeServer, status: int, retry_after: str | None = None) -> None:
    """The fake's next request (only that one) fails with ``status``."""
    fake.app.behavior = dataclasses.replace(
        fake.app.behavior, status=status, retry_after=retry_after, fail_first=fake.app.state.requests + 1
    )


def test_a_lone_deployment_is_retried_after_a_500(fakes: Fakes, start_gateway: StartGateway) -> None:
    alone = fakes.start("a", FakeBehavior(status=500, fail_first=1))
    gateway = start_gateway(gateway_config([alone], policy=POLICY))
    response = ask(gateway)
    assert response.headers["x-gateway-attempts"] == "2"
    assert alone.app.state.requests == 2
    fail_next(alone, 500)
    assert ask(gateway, stream=False).headers["x-gateway-attempts"] == "2"


def test_a_lone_deployment_waits_its_retry_after_then_answers(fakes: Fakes, start_gateway: StartGateway) -> None:
    alone = fakes.start("a", FakeBehavior(status=429, retry_after="2", fail_first=1))
    gateway = start_gateway(gateway_config([alone], policy=POLICY))
    started = time.monotonic()
    response = ask(gateway)
    assert response.headers["x-gateway-attempts"] == "2"
    # Timed at the provider: from the 429's request to the retry's.
    retried_at = alone.app.state.last_request_at
    assert retried_at is not None and retried_at - started >= 1.8


def test_retries_are_bounded_by_the_policy(fakes: Fakes, start_gateway: StartGateway) -> None:
    down = fakes.start("a", FakeBehavior(status=503))
    gateway = start_gateway(gateway_config([down], policy={**POLICY, "retries_per_deployment": 1}))
    response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 503
    assert response.headers["x-gateway-attempts"] == "2"
    assert down.app.state.requests == 2


def measured_pair(fakes: Fakes, start_gateway: StartGateway) -> tuple[FakeServer, FakeServer, Gateway]:
    """``a`` answers at once, ``b`` after 1 s; both measured (b through requests pinned to it)."""
    fast, slow = fakes.start("a"), fakes.start("b", FakeBehavior(ttft_s=1.0))
    gateway = start_gateway(gateway_config([fast, slow], policy={**POLICY, "min_samples": 1}))
    for _ in range(2):
        ask(gateway)
    ask(gateway, provider={"only": ["b"]})
    return fast, slow, gateway


def test_a_500_on_a_much_faster_deployment_is_retried_there(fakes: Fakes, start_gateway: StartGateway) -> None:
    fast, slow, gateway = measured_pair(fakes, start_gateway)
    asked = slow.app.state.requests
    fail_next(fast, 500)
    response = ask(gateway)
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("a", "2")
    assert slow.app.state.requests == asked  # a short back-off beat b's one second


def test_a_429_whose_wait_costs_more_fails_over(fakes: Fakes, start_gateway: StartGateway) -> None:
    fast, slow, gateway = measured_pair(fakes, start_gateway)
    fail_next(fast, 429, retry_after="5")
    started = time.monotonic()
    response = ask(gateway)
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "2")
    assert time.monotonic() - started < 4  # b's second, not a's five


# -- the decision itself ------------------------------------------------------------------------


def test_a_lone_deployments_gateway_timeout_is_retried_as_a_503_is(fakes: Fakes, start_gateway: StartGateway) -> None:
    """A provider's 504 or 408 is its own timeout, answered: asking again may cure it, unlike the gateway's own
    deadline passing (which would pass again)."""
    alone = fakes.start("a", FakeBehavior(status=504, fail_first=1))
    gateway = start_gateway(gateway_config([alone], policy=POLICY))
    assert ask(gateway).headers["x-gateway-attempts"] == "2"
    fail_next(alone, 408)
    assert ask(gateway, stream=False).headers["x-gateway-attempts"] == "2"
    assert alone.app.state.requests == 4


def candidate(predicted_s: float | None) -> Candidate:
    config = gateway_config(["a"])
    return Candidate(config.models[0].deployments[0], config.providers[0], model="m", predicted_s=predicted_s)


def test_what_is_safe_to_repeat() -> None:
    assert safe_to_repeat(UpstreamStatusError("x", status=500))
    assert safe_to_repeat(UpstreamStatusError("x", status=429))
    assert safe_to_repeat(UpstreamUnavailable("connection reset"))
    assert not safe_to_repeat(UpstreamStatusError("x", status=404))
    assert not safe_to_repeat(UpstreamTimeout("silent"))
    assert safe_to_repeat(UpstreamTimeout("the provider's gateway timed out", status=504))
    assert not safe_to_repeat(UpstreamUnavailable("error event before the first token", status=200))


def test_the_wait_is_jittered_doubled_and_bounded_by_the_deadline() -> None:
    policy, rng = BUILTIN_POLICIES["balanced"], random.Random(1)
    waits = [backoff_s(policy, 0, rng) for _ in range(50)]
    assert policy.retry_backoff_s * 0.5 <= min(waits) < max(waits) <= policy.retry_backoff_s
    assert all(policy.retry_backoff_s <= backoff_s(policy, 1, rng) <= 2 * policy.retry_backoff_s for _ in range(20))
    error = UpstreamStatusError("x", status=429, retry_after_s=2.0)
    assert retry_wait(policy, candidate(0.5), error, 0, None, 10.0, rng) == 2.05
    assert retry_wait(policy, candidate(0.5), error, 0, None, 2.0, rng) is None  # past the deadline
    assert retry_wait(policy, candidate(0.5), error, policy.retries_per_deployment, None, 10.0, rng) is None
    assert retry_wait(policy, candidate(0.5), error, 0, candidate(3.0), 10.0, rng) == 2.05  # 2.55 s beats 3 s
    assert retry_wait(policy, candidate(0.5), error, 0, candidate(2.0), 10.0, rng) is None
    assert retry_wait(policy, candidate(None), error, 0, candidate(2.0), 10.0, rng) is None  # nothing known
    refused = UpstreamStatusError("x", status=429)  # a load refusal: no time given
    assert retry_wait(policy, candidate(0.5), refused, 0, candidate(3.0), 10.0, rng) is None
    assert retry_wait(policy, candidate(0.5), refused, 0, None, 10.0, rng) is not None  # alone, it waits


# -- learned deadlines ---------------------------------------------------------------------------

DEADLINES = {**POLICY, "first_token_timeout_s": 30.0, "idle_timeout_s": 60.0, "min_samples": 3}


def test_a_late_first_token_silence_and_a_stall_are_given_up_on_within_seconds(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Once ``a`` has answered in milliseconds, waiting 20 s on it (30 s configured) is not what it gets."""
    usual, backup = fakes.start("a", FakeBehavior(ttft_s=0.02, tokens_per_s=200)), fakes.start("b")
    config = gateway_config(
        [usual, backup], policy={**DEADLINES, "deadline_floor_s": 1.0}, deployments={"b": {"continue_prefill": True}}
    )
    gateway = start_gateway(config)
    for _ in range(4):
        assert ask(gateway).headers["x-gateway-provider"] == "a"
    for fault in ({"ttft_s": 20.0}, {"hang_s": 20.0}):
        started = time.monotonic()
        response = ask(gateway, fake={"servers": {"a": fault}})
        assert response.headers["x-gateway-provider"] == "b", fault
        assert time.monotonic() - started < 4, fault  # the 1 s floor (4 × p99 is less), not 30 s
    started = time.monotonic()
    response = ask(gateway, fake={"servers": {"a": {"stall_after": 3}}})
    assert time.monotonic() - started < 4  # the stall was given up on in about a second, not 60
    assert response.headers["x-gateway-provider"] == "a"  # headers were a's; b finished the answer
    assert backup.app.state.requests == 3


def test_a_cold_deployment_gets_the_configured_deadlines() -> None:
    policy = dataclasses.replace(BUILTIN_POLICIES["balanced"], min_samples=3)
    assert learn(policy, None, None) is None
    few = StatsSnapshot.from_samples(samples("d", 2, ttft=0.4)).get("m", "d")
    assert learn(policy, few, None) is None
    many = StatsSnapshot.from_samples(samples("d", 10, ttft=0.4)).get("m", "d")
    gaps = GapWindow()
    for _ in range(5):
        gaps.add([0.01, 0.02, 1.5])
    learned = learn(policy, many, gaps)
    assert learned is not None
    assert learned.first_token_s == policy.deadline_floor_s  # 4 × 0.4 s is below the 4 s floor
    floored = learn(dataclasses.replace(policy, deadline_floor_s=0.5), many, gaps)
    assert floored is not None and 1.5 < floored.first_token_s < 1.7  # 4 × 0.4 s
    assert learned.idle_s == 6.0  # 4 × the longest usual gap (6 s)
    slow = StatsSnapshot.from_samples(samples("d", 10, ttft=20.0)).get("m", "d")
    capped = learn(policy, slow, None)
    assert capped is not None and capped.first_token_s == policy.first_token_timeout_s  # the configured ceiling
    assert capped.idle_s == policy.idle_timeout_s


# -- context windows -----------------------------------------------------------------------------

LONG = [{"role": "user", "content": "word " * 12_000}]  # about 15k tokens by the body's size


def test_a_prompt_too_long_for_8k_is_answered_by_the_128k_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    small, large = (
        fakes.start("a", FakeBehavior(context_window=8192)),
        fakes.start("b", FakeBehavior(context_window=131072)),
    )
    gateway = start_gateway(gateway_config([small, large], policy=POLICY))
    for stream in (True, False):
        response = ask(gateway, stream=stream, messages=LONG)
        assert response.headers["x-gateway-provider"] == "b"
        assert response.headers["x-gateway-attempts"] == ("2" if stream else "1")  # the limit was learned
    assert (small.app.state.requests, large.app.state.requests) == (1, 2)
    assert ask(gateway).headers["x-gateway-provider"] == "a"  # a short prompt still goes first to a
    samples = gateway.samples.samples
    assert [(s.provider, s.outcome) for s in samples[:2]] == [("a", "client_error"), ("b", "ok")]


def test_a_configured_window_is_skipped_and_the_last_400_reaches_the_client_unchanged(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    small, other = (
        fakes.start("a", FakeBehavior(context_window=8192)),
        fakes.start("b", FakeBehavior(context_window=8192)),
    )
    config = gateway_config([small, other], policy=POLICY, deployments={"a": {"context_window": 8192}})
    gateway = start_gateway(config)
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "messages": LONG}, timeout=10)
    assert response.status_code == 400
    assert response.headers["x-gateway-attempts"] == "1"  # a skipped (8192 configured); b's limit left no other
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("This model's maximum context length is 8192 tokens.")
    assert (small.app.state.requests, other.app.state.requests) == (0, 1)


def test_a_content_filter_400_is_relayed_as_it_is(fakes: Fakes, start_gateway: StartGateway) -> None:
    refusing = fakes.start("a", FakeBehavior(status=400, error_code="content_filter"))
    backup = fakes.start("b")
    gateway = start_gateway(gateway_config([refusing, backup], policy=POLICY))
    response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["code"] == "content_filter"
    assert backup.app.state.requests == 0
