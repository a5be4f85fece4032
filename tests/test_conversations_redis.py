"""The conversations the gateway keeps in Redis (``gateway.conversations``) while Redis is down, then back: two real
gateways on one real ``redis-server``, a chat-only deployment (only the gateway can hold its Responses state).

Why: a replica must serve on without Redis, say once (and on ``/readyz``) that its conversations are not shared,
not make each follow-up wait on a Redis it knows is gone, and write what it kept once Redis returns, so that the
other replicas can continue those conversations.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.redis_server import RedisServer
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def follow_up(gateway: Gateway, previous: str) -> httpx.Response:
    body = {"model": "m", "input": "and then?", "previous_response_id": previous}
    return httpx.post(gateway.base_url + "/responses", json=body, timeout=30)


def reasons(gateway: Gateway) -> list[str]:
    found: list[str] = httpx.get(gateway.url + "/readyz", timeout=30).json()["reasons"]
    return found


def test_conversations_kept_while_redis_was_down_reach_the_other_replicas(
    fakes: Fakes,
    start_gateway: Callable[..., Gateway],
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    stats = {"backend": "redis", "redis_url": redis_server.url, "key_prefix": "conv", "redis_timeout_s": 0.2}
    config = gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}, extra={"stats": stats})
    one, two = start_gateway(config), start_gateway(config)
    before = httpx.post(one.base_url + "/responses", json={"model": "m", "input": "hi"}, timeout=30).json()
    wait_until(lambda: follow_up(two, before["id"]).status_code == 200, timeout=15, what="shared while Redis is up")

    redis_server.stop()
    with caplog.at_level(logging.INFO, logger="gateway.conversations"):
        created = httpx.post(one.base_url + "/responses", json={"model": "m", "input": "hello"}, timeout=30)
        assert created.status_code == 200
        kept = created.json()["id"]
        assert follow_up(one, kept).status_code == 200  # this replica's own: served from its cache
        for _ in range(3):  # the other cannot tell: a clear error in the Responses shape, and one warning
            refused = follow_up(two, kept)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "conversation_store_unavailable"
        wait_until(
            lambda: any(r.startswith("conversations:") for r in reasons(one)),
            timeout=15,
            what="/readyz to name the conversations",
        )
        warned = [r for r in caplog.records if r.name == "gateway.conversations" and r.levelno >= logging.WARNING]
        assert len(warned) <= 2, [r.getMessage() for r in warned]  # once per replica, not per request

    redis_server.start()  # empty: what the replicas kept must be written again
    wait_until(lambda: follow_up(two, kept).status_code == 200, timeout=30, what="the other replica to continue it")
    wait_until(
        lambda: not any(r.startswith("conversations:") for r in reasons(one) + reasons(two)),
        timeout=30,
        what="/readyz to drop the conversations' reason",
    )
