"""Bounds on what a provider may make the gateway hold: a whole answer, a response head, one event of a stream.

Why: each was read into memory with no bound but the attempt's total deadline, so one provider (or a proxy in
front of it) sending without end could grow the gateway's memory until then. Each test stages the fault on a raw
loopback socket (``tests.raw_upstream``) and checks what the client gets: the next deployment's answer, or a 502
in its API's shape, the attempt recorded as the provider's failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.config import GatewayConfig
from gateway.sse import MAX_EVENT_BYTES
from tests.raw_upstream import RawUpstream
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
LIMIT = 64 * 1024
"""The tests' ``[limits] max_answer_bytes``."""
POLICY = {
    "extends": "fixed-order",
    "first_token_timeout_s": 5.0,
    "idle_timeout_s": 2.0,
    "connect_timeout_s": 1.0,
    "total_timeout_s": 8.0,
}
CHAT = {"model": "m", "messages": MESSAGES}


def config(first: RawUpstream, others: list[FakeServer] | None = None) -> GatewayConfig:
    return gateway_config([first, *(others or [])], base_policy=POLICY, extra={"limits": {"max_answer_bytes": LIMIT}})


def answer_of(size: int) -> bytes:
    """A whole chat answer of exactly ``size`` bytes of JSON (its content padded)."""
    body: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
    }
    pad = size - len(json.dumps(body).encode())
    body["choices"][0]["message"]["content"] = "a" * pad
    data = json.dumps(body).encode()
    assert len(data) == size
    return data


def framed(data: bytes, framing: str) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    if framing == "content-length":
        return head + b"content-length: %d\r\n\r\n" % len(data) + data
    return head + b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


def outcomes(gateway: Gateway, count: int) -> list[tuple[str, str]]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    return [(s.provider, s.outcome) for s in gateway.samples.samples]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_whole_answer_of_the_limit_is_relayed_and_one_byte_more_falls_back(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], framing: str
) -> None:
    exact = start_gateway(config(raw("stale", framed(answer_of(LIMIT), framing))))
    response = httpx.post(exact.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 200, response.text
    assert len(response.content) == LIMIT

    over = start_gateway(config(raw("stale", framed(answer_of(LIMIT + 1), framing)), [fakes.start("b")]))
    response = httpx.post(over.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 200, response.text
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "2")
    assert outcomes(over, 2) == [("raw", "upstream_error"), ("b", "ok")]


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_an_endless_whole_answer_is_a_502_in_the_clients_shape_once_past_the_limit(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], api: str
) -> None:
    # Close-delimited, no length: before the bound, the gateway read until the total deadline (a 504 then).
    endless = raw("endless", b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"a": "', b"a" * 16384)
    gateway = start_gateway(config(endless))
    if api == "chat":
        response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=15)
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("upstream_error", "upstream_answer_too_large")
    else:
        request = {"model": "m", "max_tokens": 8, "messages": MESSAGES}
        response = httpx.post(gateway.base_url + "/messages", json=request, timeout=15)
        assert response.json()["type"] == "error"
        error = response.json()["error"]
        assert error["type"] == "api_error"
    assert response.status_code == 502, response.text
    assert error["message"].endswith(f"raw: the answer is larger than {LIMIT} bytes ([limits] max_answer_bytes)")
    assert outcomes(gateway, 1) == [("raw", "upstream_error")]
    # Dropped at the limit: the provider was stopped by the closed connection, not by its own bound.
    wait_until(lambda: endless.connections == 1 and endless.sent < 64 * LIMIT, what="the answer dropped")
    assert endless.connections == 1  # the provider's answer, not a connection failure to repeat


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_head_that_never_ends_falls_back_or_is_a_502(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], stream: bool
) -> None:
    # Before the bound, httptools buffered the header block for as long as it came: until the total deadline.
    header = b"x-filler: " + b"a" * 1000 + b"\r\n"
    gateway = start_gateway(config(raw("endless", b"HTTP/1.1 200 OK\r\n", header), [fakes.start("b")]))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=15)
    assert response.status_code == 200, response.text
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "2")

    alone = start_gateway(config(raw("endless", b"HTTP/1.1 200 OK\r\n", header)))
    response = httpx.post(alone.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=15)
    assert response.status_code == 502, response.text
    assert "the provider's response head passed 65536 bytes" in response.json()["error"]["message"]
    assert outcomes(alone, 1)[-1] == ("raw", "upstream_error")


def test_the_answer_limit_is_validated_like_its_neighbours() -> None:
    with pytest.raises(Exception, match=r"limits\.max_answer_bytes"):
        gateway_config(["a"], extra={"limits": {"max_answer_bytes": 0}})
    assert gateway_config(["a"]).limits.max_answer_bytes == 256 * 1024 * 1024


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
CONTENT = (
    b'data: {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "%s"}}]}\n\n'
)


@pytest.mark.parametrize("where", ["one-event", "no-output"])
def test_a_stream_that_never_ends_an_event_or_never_says_anything_falls_back_at_its_bound(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], where: str
) -> None:
    # Before any output: one event that never ends, or whole events that carry nothing (comments), held for the
    # client until the first token. Before the bound both grew until the first-token deadline; the meter's pending
    # event was copied anew with every chunk, quadratic in its size.
    script, filler = (
        (SSE_HEAD + b'data: {"x": "', b"a" * 65536)
        if where == "one-event"
        else (SSE_HEAD, b": " + b"p" * 65530 + b"\n\n")
    )
    endless = raw("endless", script, filler)
    gateway = start_gateway(config(endless, [fakes.start("b")]))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=15)
    assert response.status_code == 200, response.text
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "2")
    assert outcomes(gateway, 2) == [("raw", "broken_stream"), ("b", "ok")]
    assert endless.sent < MAX_EVENT_BYTES + 8 * 1024 * 1024


def test_an_event_that_never_ends_mid_answer_ends_the_clients_stream_with_an_error_event(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream]
) -> None:
    script = SSE_HEAD + CONTENT % b"hi" + b'data: {"choices": [{"index": 0, "delta": {"content": "'
    endless = raw("endless", script, b"a" * 65536)
    gateway = start_gateway(config(endless))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=15)
    assert response.status_code == 200
    events = [json.loads(line[6:]) for line in response.text.split("\n\n") if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"]["content"] == "hi"
    error = events[-1]["error"]
    assert error["code"] == "upstream_stream_broken"
    assert error["message"].startswith("raw: the stream sent ") and "of one event without ending it" in error["message"]
    assert outcomes(gateway, 1) == [("raw", "broken_stream")]
    assert endless.sent < MAX_EVENT_BYTES + 8 * 1024 * 1024


def test_a_stream_event_of_four_megabytes_is_relayed_whole(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream]
) -> None:
    big = b"b" * (4 * 1024 * 1024)
    body = CONTENT % b"hi" + CONTENT % big + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    gateway = start_gateway(config(raw("stale", head + body)))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=15)
    assert response.status_code == 200
    assert response.content == body
    assert outcomes(gateway, 1) == [("raw", "ok")]


def test_trailers_that_never_end_fall_back_or_are_a_502(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream]
) -> None:
    # A chunked answer's trailers come after its last chunk as headers do, and were kept (every line) without end.
    script = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
    trailer = b"x-filler: " + b"a" * 1000 + b"\r\n"
    gateway = start_gateway(config(raw("endless", script, trailer), [fakes.start("b")]))
    response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=15)
    assert response.status_code == 200, response.text
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "2")

    alone = start_gateway(config(raw("endless", script, trailer)))
    response = httpx.post(alone.base_url + "/chat/completions", json=CHAT, timeout=15)
    assert response.status_code == 502, response.text
    assert "the provider sent 65536 bytes of trailers without its body's end" in response.json()["error"]["message"]
    assert outcomes(alone, 1)[-1] == ("raw", "upstream_error")
