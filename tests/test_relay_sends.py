"""How a stream's bytes leave the relay: each upstream read in one ``send``, the ending in the same ``send`` as the
last bytes, nothing held back to wait for more, and the bytes those of the upstream.

The gateway app is called directly (ASGI), in front of the fake provider on loopback, so that each ``send`` it
makes is seen as it is made (encode/starlette's way of testing a response's messages).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import MutableMapping
from typing import Any

import httpx

from gateway.app import AppOptions, create_app
from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer

MESSAGES = [{"role": "user", "content": "hi"}]


def _body(fake: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}, "fake": fake}


async def _sends_through_gateway(
    fake: FakeServer, body: dict[str, Any], policy: dict[str, Any]
) -> list[tuple[float, MutableMapping[str, Any]]]:
    """Every message the gateway's chat endpoint sent for one request, with the loop time it was sent at."""
    app = create_app(gateway_config([fake], policy=policy), AppOptions(environ={}, probe_interval_s=None))
    raw = httpx.Request("POST", "http://gw/v1/chat/completions", json=body).content
    sent: list[tuple[float, MutableMapping[str, Any]]] = []
    done = asyncio.Event()
    read = False

    async def receive() -> dict[str, Any]:
        nonlocal read
        if not read:
            read = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append((asyncio.get_running_loop().time(), message))
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    async with app.router.lifespan_context(app):
        await app(scope, receive, send)
    return sent


def _direct(fake: FakeServer, body: dict[str, Any]) -> bytes:
    response = httpx.post(fake.base_url + "/chat/completions", json=dict(body, model="fake-upstream"), timeout=10)
    assert response.status_code == 200
    return _normalised(response.content)


def _normalised(raw: bytes) -> bytes:
    """Without what differs between two answers of the fake (its response id, the time)."""
    raw = re.sub(rb'"id": "fake-\d+"', b'"id": "X"', raw)
    return re.sub(rb'"created": \d+', b'"created": 0', raw)


def _bodies(sent: list[tuple[float, MutableMapping[str, Any]]]) -> list[MutableMapping[str, Any]]:
    return [message for _, message in sent if message["type"] == "http.response.body"]


def test_the_stream_ends_in_the_send_that_carries_its_last_bytes(fakes: Fakes) -> None:
    fake = fakes.start("fake", FakeBehavior(output_tokens=12))
    body = _body({})
    sent = asyncio.run(_sends_through_gateway(fake, body, {"first_byte_keepalive_s": 15}))
    bodies = _bodies(sent)
    assert _normalised(b"".join(m["body"] for m in bodies)) == _direct(fake, body)  # byte-identical to going direct
    *middle, last = bodies
    assert last["body"].endswith(b"data: [DONE]\n\n") and last.get("more_body", False) is False
    assert all(m["more_body"] is True and m["body"] for m in middle)  # no empty send, no second ending


def test_a_paced_stream_goes_out_event_by_event_as_it_arrives(fakes: Fakes) -> None:
    # An event every 100 ms: a loaded machine that stalls the gateway for 25 ms must not make two reads one.
    fake = fakes.start("fake", FakeBehavior(output_tokens=6, tokens_per_s=10.0))
    body = _body({})
    sent = asyncio.run(_sends_through_gateway(fake, body, {}))
    bodies = _bodies(sent)
    assert _normalised(b"".join(m["body"] for m in bodies)) == _direct(fake, body)
    times = [at for at, m in sent if m["type"] == "http.response.body"]
    # Each token is its own read (100 ms apart): each goes out on its own, at once, never held for the next one.
    words = [m for m in bodies if b'"content": " ' in m["body"] and b'"role"' not in m["body"]]
    assert len(words) >= 5  # the first word goes out with the role event it was held with
    assert all(m["body"].count(b"\n\n") == 1 for m in words[:-1])
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert sum(1 for gap in gaps if gap >= 0.06) >= 4  # the pace survives the relay
