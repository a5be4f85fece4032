"""A request that no deployment answered before its first byte leaves one line in the "gateway" log: the attempts
it made, the attempts it was allowed, the plan the router offered and what in it was left to ask (the soak's one
lost request had left nothing to read: "2 attempts" of a model with three deployments)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_no_deployment_answered_logs_its_attempts_and_what_was_left(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    down = [fakes.start(name, FakeBehavior(status=503)) for name in ("a", "b", "c")]
    gateway = start_gateway(gateway_config(down, base_policy={"extends": "fixed-order", "max_attempts": 2}))
    with caplog.at_level(logging.INFO, logger="gateway"):
        response = httpx.post(
            gateway.base_url + "/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": stream},
            timeout=10,
        )
    assert response.status_code == 503, response.text
    lines = [r.getMessage() for r in caplog.records if "no deployment answered before the first byte" in r.getMessage()]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.endswith(
        "(HTTP 503; attempts 2 of 2; the plan: a, b, c; left to ask: c; the attempts: "
        "a: upstream returned 503: fake a: error 503; b: upstream returned 503: fake b: error 503)"
    ), line
    assert [r.levelname for r in caplog.records if r.getMessage() == line] == ["WARNING"]
