"""Slow, idle and surplus client connections against ``gateway serve``'s protocol, with real sockets on loopback.

Each test holds sockets that misbehave (a head sent a byte at a time, a body that never ends, a connection
that says nothing), checks they are cut within the deadline, and that a well-behaved client streaming at
the same time still gets its first token at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.connections import ConnectionLimits, guarded_protocol
from gateway.fakes import FakeBehavior
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway, GatewayServers

HEADER_S = 1.0
BODY_S = 1.0
KEEPALIVE_S = 1.0
SLACK_S = 1.0
"""How late past its deadline a cut may come on a loaded machine (the timers fire at once on an idle one)."""
FIRST_TOKEN_S = 0.5
"""A well-behaved stream's first token, with the fake answering at once, while the slow sockets are held."""


@pytest.fixture
def guarded(fakes: Fakes) -> Iterator[Callable[..., Gateway]]:
    servers = GatewayServers()

    def start(**server: Any) -> Gateway:
        fake = fakes.start("p", FakeBehavior(output_tokens=8))
        settings = {"header_timeout_s": HEADER_S, "body_timeout_s": BODY_S, "keepalive_timeout_s": KEEPALIVE_S}
        config = parse_config(
            {
                "providers": [{"name": "p", "base_url": fake.base_url, "apis": ["chat", "messages"]}],
                "models": [{"name": "m", "deployments": [{"provider": "p", "model": "up"}]}],
                "server": {**settings, **server},
            },
            source="test.toml",
        )
        gateway = servers.serve(
            create_app(config, AppOptions(environ={})), http=guarded_protocol(ConnectionLimits.from_config(config))
        )
        gateway.server.server.config.timeout_keep_alive = config.server.keepalive_timeout_s  # type: ignore[assignment]
        return gateway

    yield start
    servers.stop()


def _connect(gateway: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.server.port), timeout=10)


def _until_closed(
    sock: socket.socket, started: float, *, trickle: bytes = b"", limit_s: float = 10.0
) -> tuple[bytes, float]:
    """Reads ``sock`` until the server closes it, sending ``trickle`` a byte every 0.2 s meanwhile; returns what
    came back and the seconds since ``started``."""
    received = b""
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() - started < limit_s:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            if sent < len(trickle):
                try:
                    sock.sendall(trickle[sent : sent + 1])
                except OSError:  # the server closed while we wrote: the next recv sees it
                    pass
                sent += 1
            continue
        except ConnectionResetError:
            break
        if not data:
            break
        received += data
    return received, time.monotonic() - started


def _json_body(response: bytes) -> dict[str, Any]:
    head, _, body = response.partition(b"\r\n\r\n")
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def _first_tokens(gateway: Gateway, count: int) -> list[float]:
    """Seconds to the first content chunk of ``count`` streams, one after another, through the OpenAI SDK."""
    waits: list[float] = []
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        for _ in range(count):
            started = time.monotonic()
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    waits.append(time.monotonic() - started)
                    break
            stream.close()
    return waits


class _Held:
    """Misbehaving sockets read on threads until the server cuts them; ``results`` holds (bytes, seconds)."""

    def __init__(self) -> None:
        self.results: list[tuple[bytes, float]] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def hold(self, sock: socket.socket, first: bytes, trickle: bytes = b"") -> None:
        started = time.monotonic()
        if first:
            sock.sendall(first)

        def run() -> None:
            with sock:
                result = _until_closed(sock, started, trickle=trickle)
            with self._lock:
                self.results.append(result)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)

    def join(self) -> list[tuple[bytes, float]]:
        for thread in self._threads:
            thread.join(timeout=15)
        return self.results


def test_a_head_sent_a_byte_at_a_time_is_cut_and_others_stream_meanwhile(guarded: Callable[..., Gateway]) -> None:
    gateway = guarded()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
    held = _Held()
    for _ in range(20):
        held.hold(_connect(gateway), b"P", trickle=head[1:])
    silent = _connect(gateway)  # opens and never says a word
    held.hold(silent, b"")
    waits = _first_tokens(gateway, 5)
    results = held.join()
    assert len(results) == 21
    for _, seconds in results:
        assert seconds < HEADER_S + SLACK_S, seconds
    answered = [response for response, _ in results if response]
    assert len(answered) == 20  # the silent one is closed without a word: nothing of a request arrived
    for response in answered:
        assert response.startswith(b"HTTP/1.1 408 ")
        assert _json_body(response)["error"]["code"] == "request_timeout"
    assert max(waits) < FIRST_TOKEN_S, waits


@pytest.mark.parametrize(
    ("path", "trickle"),
    [("/v1/chat/completions", b""), ("/v1/chat/completions", b"x" * 100), ("/v1/messages", b"")],
    ids=["chat-stalled", "chat-trickled", "messages-stalled"],
)
def test_a_body_that_never_ends_gets_408_in_the_apis_shape(
    guarded: Callable[..., Gateway], path: str, trickle: bytes
) -> None:
    gateway = guarded()
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    held = _Held()
    for _ in range(10):
        held.hold(_connect(gateway), head.encode() + b'{"model": "m", ', trickle=trickle)
    waits = _first_tokens(gateway, 5)
    results = held.join()
    assert len(results) == 10
    for response, seconds in results:
        assert seconds < BODY_S + SLACK_S, seconds
        assert response.startswith(b"HTTP/1.1 408 "), response[:100]
        body = _json_body(response)
        if path == "/v1/messages":
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
            assert "body did not arrive" in body["error"]["message"]
        else:
            assert body["error"]["code"] == "body_timeout"
    assert max(waits) < FIRST_TOKEN_S, waits


def test_an_idle_kept_alive_connection_is_closed(guarded: Callable[..., Gateway]) -> None:
    gateway = guarded()
    with _connect(gateway) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        response, seconds = _until_closed(sock, started)
    assert response.startswith(b"HTTP/1.1 200 ")
    assert KEEPALIVE_S <= seconds < KEEPALIVE_S + SLACK_S, seconds


def test_a_kept_alive_connection_serves_many_requests_within_the_deadlines(guarded: Callable[..., Gateway]) -> None:
    # The deadlines are per request: a connection busy for longer than all of them together stays open.
    gateway = guarded()
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        started = time.monotonic()
        answers = 0
        while time.monotonic() - started < HEADER_S + BODY_S + 0.5:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            answers += 1
    assert answers > 3


def test_connections_past_the_cap_are_refused_and_the_cap_frees_up(guarded: Callable[..., Gateway]) -> None:
    gateway = guarded(max_connections=4, header_timeout_s=30)
    held = [_connect(gateway) for _ in range(4)]
    for sock in held:
        sock.sendall(b"G")  # a request begun: each connection is known to the server before the next opens
    with _connect(gateway) as refused:
        response, _ = _until_closed(refused, time.monotonic())
    assert response.startswith(b"HTTP/1.1 503 ")
    assert _json_body(response)["error"]["code"] == "too_many_connections"
    for sock in held:
        sock.close()
    # Connections the clients closed are released; new ones are served again.
    deadline = time.monotonic() + 5
    while True:
        with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
            try:
                client.models.list()
                break
            except openai.APIStatusError as error:
                assert error.status_code == 503 and time.monotonic() < deadline


def test_a_pipelined_head_behind_a_long_stream_does_not_cut_the_stream(
    guarded: Callable[..., Gateway], fakes: Fakes
) -> None:
    # The first request streams for longer than the header deadline; the next one's first bytes arrive
    # meanwhile (pipelined). The stream must finish whole; the slow head is judged once the connection is free.
    gateway = guarded()
    body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
            "fake": {"tokens_per_s": 10, "output_tokens": 25},
        }
    ).encode()
    first = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    first += f"content-length: {len(body)}\r\n\r\n".encode() + body
    with _connect(gateway) as sock:
        started = time.monotonic()
        sock.sendall(first)
        head = sock.recv(65536)  # the stream has begun ...
        sock.sendall(b"GET /hea")  # ... when the next request's head begins, never to be finished
        response, seconds = _until_closed(sock, started)
        response = head + response
    assert seconds > HEADER_S + 0.5  # the stream ran past the deadline ...
    end = b"data: [DONE]\n\n\r\n0\r\n\r\n"
    assert response.startswith(b"HTTP/1.1 200 ") and end in response  # ... and finished whole,
    after = response.split(end, 1)[1]
    assert after == b"" or after.startswith(b"HTTP/1.1 408 "), after  # the stalled head answered only after it
    assert seconds < 2.5 + max(HEADER_S, KEEPALIVE_S) + SLACK_S  # then the stalled head was cut (no 408 mid-stream)
