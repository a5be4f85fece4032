"""An event that is not JSON before a stream's first output, over real loopback HTTP with the SDKs as clients.

Nothing has reached the client yet, and the meter parses each event before the first output anyway: such an
event fails the attempt (a broken stream, counted in ``gateway_malformed_events_total``) and the next deployment
answers; the client's stream is the other deployment's, whole, without the bad event. After the first output an
event that is not JSON is relayed as it came (``tests/test_streaming.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
APIS = {name: {"apis": ["chat", "messages"]} for name in ("a", "b")}
HI: Any = [{"role": "user", "content": "hi"}]


def _outcomes(gateway: Gateway) -> list[tuple[str, str]]:
    wait_until(lambda: len(gateway.samples.samples) >= 2, what="both attempts' samples")
    return [(s.provider, s.outcome) for s in gateway.samples.samples]


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_malformed_event_before_the_first_output_falls_back(
    fakes: Fakes, start_gateway: StartGateway, api: str
) -> None:
    bad = fakes.start("a", FakeBehavior(output_tokens=4, malformed_after=0))
    good = fakes.start("b", FakeBehavior(output_tokens=4))
    gateway = start_gateway(gateway_config([bad, good], provider_options=APIS))
    if api == "chat":
        raw = sdk(gateway.base_url).chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        headers = raw.headers
    else:
        url = gateway.base_url.removesuffix("/v1")
        with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as claude:
            answer = claude.messages.with_raw_response.create(model="m", max_tokens=64, messages=HI, stream=True)
            pieces = [
                e.delta.text for e in answer.parse() if e.type == "content_block_delta" and e.delta.type == "text_delta"
            ]
            text, headers = "".join(pieces), answer.headers
    assert text.split() == "the quick brown fox".split()
    assert headers["x-gateway-provider"] == "b" and headers["x-gateway-attempts"] == "2"
    assert _outcomes(gateway) == [("a", "broken_stream"), ("b", "ok")]
    metric = gateway.metrics.registry.get_sample_value
    assert metric("gateway_malformed_events_total", {"model": "m", "provider": "a"}) == 1


def test_the_client_never_gets_the_malformed_event(fakes: Fakes, start_gateway: StartGateway) -> None:
    bad = fakes.start("a", FakeBehavior(output_tokens=4, malformed_after=0))
    good = fakes.start("b", FakeBehavior(output_tokens=4))
    gateway = start_gateway(gateway_config([bad, good]))
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    response = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10)
    assert response.status_code == 200 and response.headers["x-gateway-provider"] == "b"
    assert b"{not json" not in response.content and response.content.endswith(b"data: [DONE]\n\n")
