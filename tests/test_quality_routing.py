"""Routing on validity, end to end: an invalid answer counts against its deployment by request kind, and
``min_valid_rate`` moves a deployment that breaks one kind of request behind the others for that kind only
(the router's side of it, unit by unit: ``tests/test_routing_belief_session.py``). ``retry_invalid`` retries an
invalid whole answer on the next deployment; a stream is never retried.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
BALANCED = {"extends": "balanced", "first_token_timeout_s": 5.0}


def test_a_fast_provider_breaking_tool_calls_loses_tool_traffic_not_chat(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Two fakes: the faster breaks 30% of its tool calls' arguments (seeded). Within a bounded run of traffic
    (under a minute), tool-using requests move to the slower valid one; plain requests stay on the faster."""
    fast = fakes.start("fast", FakeBehavior(ttft_s=0.005, output_tokens=8, invalid_tool_json_rate=0.3, seed=3))
    slow = fakes.start("slow", FakeBehavior(ttft_s=0.06, output_tokens=8, seed=4))
    gateway = start_gateway(gateway_config([fast, slow], base_policy=BALANCED))
    served: dict[str, list[str]] = {"tools": [], "plain": []}
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        for i in range(80):
            kind = "tools" if i % 2 == 0 else "plain"
            body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "weather in Paris?"}]}
            if kind == "tools":
                body["tools"] = TOOLS
            response = client.post("/chat/completions", json=body)
            assert response.status_code == 200
            served[kind].append(response.headers["x-gateway-provider"])
            if time.monotonic() > deadline:
                break
    late_tools = Counter(served["tools"][-20:])
    late_plain = Counter(served["plain"][-20:])
    assert late_tools["slow"] >= 19, served["tools"]
    assert late_plain["fast"] >= 18, served["plain"]
    wait_until(lambda: len(gateway.samples.samples) >= len(served["tools"]) + len(served["plain"]))
    broken = [s for s in gateway.samples.samples if s.validity == "tool_args_not_json"]
    assert broken and all(s.deployment == "fast" and s.kind == "tools" for s in broken)


def test_retry_invalid_retries_a_whole_answer_never_a_stream(fakes: Fakes, start_gateway: StartGateway) -> None:
    broken = fakes.start("a", FakeBehavior(output_tokens=8, fault="invalid_tool_json"))
    good = fakes.start("b", FakeBehavior(output_tokens=8))
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS}
    for retry, expected in ((False, "a"), (True, "b")):
        gateway = start_gateway(gateway_config([broken, good], policy={"retry_invalid": retry}))
        response = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=30)
        assert response.headers["x-gateway-provider"] == expected
        count = 1 + retry
        samples = gateway.samples.samples
        wait_until(lambda: len(samples) >= count)  # noqa: B023 (waited for within the iteration)
        assert [s.validity for s in gateway.samples.samples] == (
            ["tool_args_not_json", "valid"] if retry else ["tool_args_not_json"]
        )
        assert response.headers["x-gateway-attempts"] == str(1 + retry)
        streamed = httpx.post(gateway.base_url + "/chat/completions", json={**body, "stream": True}, timeout=30)
        assert streamed.headers["x-gateway-provider"] == "a"  # a stream's bytes are the client's: reported only
