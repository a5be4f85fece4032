"""After an outage, traffic comes back, over real loopback servers, under the measured default policy: a
recovered deployment that is better by the policy (here: faster to its first token) gets the requests
again once its circuit closes. One equal to the fallback is not preferred (``docs/routing.md``)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import httpx

from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
CHAT = {"model": "m", "messages": MESSAGES, "stream": True}
POLICY = {"failure_threshold": 2, "cooldown_s": 0.2, "max_cooldown_s": 0.5}


def test_a_recovered_deployment_better_by_the_policy_gets_its_traffic_back(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    fast = fakes.start("fast", FakeBehavior(ttft_s=0.02, output_tokens=8))
    slow = fakes.start("slow", FakeBehavior(ttft_s=0.3, output_tokens=8))
    gateway = start_gateway(gateway_config([fast, slow], base_policy={}, policy=POLICY))
    circuits = gateway.runtime.router.state.health.circuits
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:

        def served() -> str:
            response = client.post("/chat/completions", json=CHAT)
            assert response.status_code == 200, response.text
            return response.headers["x-gateway-provider"]

        for _ in range(12):  # both measured; the fast one leads
            served()
        fast.app.behavior = dataclasses.replace(fast.app.behavior, status=503)
        while circuits.get(("m", "fast")) is None or circuits[("m", "fast")].state != "open":
            served()
        for _ in range(4):
            assert served() == "slow"
        fast.app.behavior = dataclasses.replace(fast.app.behavior, status=200)
        wait_until(lambda: circuits[("m", "fast")].state == "closed", timeout=5, what="the circuit closing")
        after = Counter(served() for _ in range(14))
    assert after["fast"] >= 11, after  # back to the better one, bar a look at the other now and then
