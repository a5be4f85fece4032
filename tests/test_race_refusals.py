"""A race respects a refusal, over real loopback servers: a model's first streamed request goes to every
deployment at once (the cold-start race), and a request-blaming 400 from one of them ends the request in
that 400, whoever streamed first; a ``context_length_exceeded`` keeps the racer already running on the
larger window instead of cancelling it and calling it again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.relay.drain import LOSER_HOLD_MIN_S
from gateway.routing.choose import COLD_RACE
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_a_race_against_a_content_filter_ends_in_its_400(fakes: Fakes, start_gateway: StartGateway) -> None:
    streamer = fakes.start("fast", FakeBehavior(output_tokens=4))
    # The filter's refusal comes a little after the other's first token: a race decided by timing alone
    # answered around it.
    refusing = FakeBehavior(status=400, error_code="content_policy_violation", hang_s=0.01)
    censor = fakes.start("censor", refusing)
    gateway = start_gateway(gateway_config([streamer, censor], base_policy={}))
    response = httpx.post(gateway.url + "/v1/chat/completions", json=BODY, timeout=10)
    assert (streamer.app.state.requests, censor.app.state.requests) == (1, 1)  # it was a race
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "content_policy_violation"
    assert response.headers["x-gateway-provider"] == "censor"


def test_a_context_length_race_bills_one_attempt_on_the_larger_deployment(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    small = fakes.start("small", FakeBehavior(context_window=8))
    large = fakes.start("large", FakeBehavior(ttft_s=0.3, output_tokens=4))
    gateway = start_gateway(gateway_config([small, large], base_policy={}))
    response = httpx.post(gateway.url + "/v1/chat/completions", json=BODY, timeout=10)
    assert response.status_code == 200 and response.headers["x-gateway-provider"] == "large"
    assert large.app.state.requests == 1  # kept, not cancelled and called again
    assert response.headers["x-gateway-attempts"] == "2"
    wait_until(lambda: len(access_lines(caplog)) == 1)
    (line,) = access_lines(caplog)
    assert line["attempts"] == 2
    assert [(a["deployment"], a["outcome"]) for a in line["attempt_costs"]] == [
        ("small", "client_error"),
        ("large", "ok"),
    ]
    assert line["cost_usd"] == line["attempt_costs"][1]["cost_usd"]  # one attempt billed


def test_a_deployment_that_refused_in_the_race_is_not_its_fallback(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    # Both too small. The one that refuses last states no limit: a fallback chosen by "a window larger than the
    # last refusal's" used to include the racer that had refused first, and called it again.
    caplog.set_level(logging.INFO, logger="gateway.access")
    small = fakes.start("small", FakeBehavior(context_window=16))
    unsaid = FakeBehavior(status=400, error_code="context_length_exceeded", hang_s=0.2)
    smaller = fakes.start("smaller", unsaid)
    gateway = start_gateway(gateway_config([small, smaller], base_policy={}))
    response = httpx.post(gateway.url + "/v1/chat/completions", json=BODY, timeout=10)
    assert (small.app.state.requests, smaller.app.state.requests) == (1, 1)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert response.headers["x-gateway-attempts"] == "2"
    (line,) = access_lines(caplog, count=1)
    assert line["attempts"] == 2


def test_a_silent_cold_race_loser_frees_its_slot_within_a_bounded_hold(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    fast = fakes.start("fast", FakeBehavior(output_tokens=4))
    silent = fakes.start("silent", FakeBehavior(hang_s=30))
    gateway = start_gateway(gateway_config([fast, silent], base_policy={}))
    response = httpx.post(gateway.url + "/v1/chat/completions", json=BODY, timeout=10)
    assert response.status_code == 200 and response.headers["x-gateway-provider"] == "fast"
    assert silent.app.state.requests == 1  # it raced
    router = gateway.runtime.router
    # Not its 30 s first-token deadline: about LOSER_HOLD_MIN_S past a winner that answered in milliseconds.
    wait_until(lambda: router.in_flight("m", "silent") == 0, timeout=3, what="the loser's slot freed")
    held = gateway.metrics.registry.get_sample_value(
        "gateway_race_loser_seconds_total", {"model": "m", "provider": "silent"}
    )
    assert held is not None and LOSER_HOLD_MIN_S * 0.9 <= held < 2.5


def test_a_cold_race_is_at_most_three_wide(fakes: Fakes, start_gateway: StartGateway) -> None:
    servers = [fakes.start(name, FakeBehavior(ttft_s=0.3, output_tokens=4)) for name in "abcde"]
    gateway = start_gateway(gateway_config(servers, base_policy={}))
    response = httpx.post(gateway.url + "/v1/chat/completions", json=BODY, timeout=10)
    assert response.status_code == 200
    assert sum(server.app.state.requests for server in servers) == COLD_RACE
