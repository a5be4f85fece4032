"""An upstream that echoes its key inside a stream, over real loopback servers: the client never reads the key,
not even when the upstream split it across two writes (the relay forwards whole events only, so each event is
redacted whole)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.fakes.asgi import lifespan
from tests.support.gateway import Gateway, GatewayServers
from tests.support.servers import ServerThread

PROVIDER_KEY = "sk-provider-CANARY-3e8f0a"


def chunk(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    event = {"id": "c", "object": "chat.completion.chunk", "model": "up", "choices": [choice]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class EchoingStream:
    """A chat provider whose answer quotes the key it was sent: once whole, once split across two writes."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        while (await receive()).get("more_body"):
            pass
        key = dict(scope["headers"])[b"authorization"].decode().removeprefix("Bearer ")
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        split = chunk(f"your key {key} is wrong")
        half = split.index(key.encode()) + len(key) // 2
        for part in (chunk(f"I was sent {key}."), split[:half], split[half:], chunk("", "stop"), b"data: [DONE]\n\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0.01)  # the upstream's own pace: separate writes, separate reads
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    upstream = ServerThread(EchoingStream()).start()
    servers = GatewayServers()
    config = parse_config(
        {
            "providers": [{"name": "echo", "base_url": upstream.url + "/v1", "api_key_env": "ECHO_KEY"}],
            "models": [{"name": "m", "deployments": [{"provider": "echo", "model": "up"}]}],
        },
        source="test.toml",
    )
    yield servers.serve(create_app(config, AppOptions(environ={"ECHO_KEY": PROVIDER_KEY})))
    servers.stop()
    upstream.stop()


def test_a_key_echoed_in_a_stream_never_reaches_the_client(gateway: Gateway) -> None:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        with client.stream("POST", "/chat/completions", json=body) as response:
            received = b"".join(response.iter_raw())
    assert response.status_code == 200 and received.endswith(b"data: [DONE]\n\n")
    assert PROVIDER_KEY.encode() not in received
    assert received.count(b"***") == 2
