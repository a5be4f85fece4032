"""What a broken attempt is billed for, over real loopback servers: with no usage in its stream, its prompt is
counted with the pinned tokenizer (not the body's size estimate), and the access log says when a usage split
came from the gateway's tokenizer rather than the provider."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.relay.prompt_count import count_prompt
from gateway.tokens import load_token_counter
from tests.support.access import access_lines
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
BODY: dict[str, Any] = {"model": "m", "messages": MESSAGES, "stream": True}


def test_a_broken_attempts_prompt_is_billed_by_the_pinned_tokenizer(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    broken = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    config = gateway_config([broken])
    gateway = start_gateway(config)
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        with client.stream("POST", "/chat/completions", json=BODY) as response:
            response.read()
    (sample,) = gateway.samples.samples
    assert sample.outcome == "broken_stream" and sample.usage_prompt_tokens is None and sample.output_tokens
    counted = count_prompt(BODY, load_token_counter(config.stats.tokenizer))
    estimate = sample.prompt_tokens_estimate
    assert estimate is not None and counted < estimate  # the estimate (bytes / 4) runs high
    deployment = config.models[0].deployments[0]
    assert sample.cost_usd == pytest.approx(deployment.cost_usd(counted, sample.output_tokens))
    wait_until(lambda: len(access_lines(caplog)) == 1)
    (line,) = access_lines(caplog)
    assert line["usage_source"] == "gateway_tokenizer"


def test_a_providers_usage_is_said_to_be_the_providers(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    gateway = start_gateway(gateway_config([fakes.start("a", FakeBehavior(output_tokens=4))]))
    httpx.post(gateway.base_url + "/chat/completions", json=BODY, timeout=10)
    wait_until(lambda: len(access_lines(caplog)) == 1)
    assert access_lines(caplog)[0]["usage_source"] == "provider"
