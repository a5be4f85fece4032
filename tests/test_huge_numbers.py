"""Numbers past any model's, from a client or an operator: answered in words, never a 500.

Why: JSON integers have no bound, and the gateway turns token counts into floats to predict time and cost. A
client that writes ``max_tokens: 1e400``-as-an-integer for "no limit" (or an operator's typo in a query of
``GET /v1/gateway/routes``) made that conversion raise ``OverflowError``: a 500 with a traceback in the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx

from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway

HUGE = 10**400


def test_a_huge_max_tokens_is_forwarded_as_sent_and_planned_within_bounds(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake]))
    for stream in (False, True):
        body = {"model": "m", "messages": MESSAGES, "max_tokens": HUGE, "stream": stream}
        reply = httpx.post(gateway.url + "/v1/chat/completions", content=json.dumps(body), timeout=10)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-gateway-provider"] == "a"
    sent = [r.body for r in fake.app.state.recorded if r.path.endswith("/chat/completions")]
    assert [b is not None and b["max_tokens"] for b in sent] == [HUGE, HUGE]  # the provider answers for its own limit


def test_the_routes_endpoint_refuses_a_huge_count_in_words(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a")]))  # loopback and no keys: the admin endpoints answer
    for query in (f"prompt_tokens={HUGE}", f"max_tokens={HUGE}", f"session_deployment=a&cached_tokens={HUGE}"):
        reply = httpx.get(f"{gateway.url}/v1/gateway/routes?{query}", timeout=10)
        assert reply.status_code == 400, (query, reply.text)
        error = reply.json()["error"]
        assert error["param"] == query.split("&")[-1].split("=")[0]
        assert "must be a positive integer up to 2147483647" in error["message"]
        assert len(error["message"]) < 400  # the 401 digits are clipped, not echoed whole
    assert httpx.get(gateway.url + "/v1/gateway/routes?prompt_tokens=2147483647", timeout=10).status_code == 200
