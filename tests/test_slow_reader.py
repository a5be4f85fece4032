"""A client that stops reading, over a real loopback socket: the relay's sends block once the socket's buffers
are full, and at the request's total deadline (``total_timeout_s``) the upstream stream is closed and its
concurrency slot freed, instead of both being held for as long as the client keeps the connection open."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]


@pytest.fixture
def stalled_client() -> Iterator[Callable[[str, dict[str, object]], socket.socket]]:
    """Sends one request on a socket with a tiny receive buffer, then never reads (closed at teardown)."""
    opened: list[socket.socket] = []

    def send(url: str, body: dict[str, object]) -> socket.socket:
        parts = urlsplit(url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
        payload = json.dumps(body).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n"
        ).encode()
        sock.sendall(head + payload)
        opened.append(sock)
        return sock

    yield send
    for sock in opened:
        sock.close()


def test_a_client_that_stops_reading_frees_the_upstream_at_the_deadline(
    fakes: Fakes, start_gateway: StartGateway, stalled_client: Callable[[str, dict[str, object]], socket.socket]
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=200_000), record=False)
    gateway = start_gateway(gateway_config([fake], policy={"total_timeout_s": 1.0}))
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    stalled_client(gateway.url, body)
    router = gateway.runtime.router
    wait_until(lambda: fake.app.state.open_streams == 1, what="the stream under way")
    # The stream stalls on the client's full buffers; the deadline (1 s, plus the relay's grace) ends it.
    wait_until(lambda: fake.app.state.open_streams == 0, timeout=6, what="the upstream stream closed")
    wait_until(lambda: router.in_flight("m", "a") == 0, timeout=2, what="the slot freed")
    (sample,) = gateway.samples.samples
    # Both ends of the stream carry the same deadline: the relay's blocked send (the client gone quiet) or the
    # upstream's total timeout (its stream no longer read) may fire first; either frees the stream and the slot (the
    # latter is ``deadline`` when the provider's last output was recent, ``timeout`` when it was not).
    assert sample.outcome in ("client_cancelled", "timeout", "deadline")
