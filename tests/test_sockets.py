"""Sockets, over a real loopback socket: a request refused before its body was read (401, 413) has its
connection closed, not held open while the body trickles in; and the process's descriptors (its open-file
limit raised at start-up, a warning when they run short)."""

from __future__ import annotations

import logging
import resource
import socket
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from gateway.descriptors import WARN_SHARE, DescriptorWatch, open_descriptors, raise_open_file_limit
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]


def refused_early(url: str, headers: str, sent_body: bytes) -> tuple[bytes, bytes]:
    """Send ``headers`` and the start of a larger body; (the response, what came after it before the close)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=3) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nhost: {parts.netloc}\r\n{headers}\r\n".encode())
        sock.sendall(sent_body)  # ... and the rest never comes
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        head, _, rest = received.partition(b"\r\n\r\n")
        while True:
            try:
                data = sock.recv(65536)  # a socket left open times out here (3 s): the test fails
            except ConnectionResetError:
                # Closed with the unread body still in the server's buffer: the kernel resets rather than
                # ends the connection. Closed all the same (the answer was read above).
                return head, rest
            if not data:
                return head, rest
            rest += data


def test_a_401_before_the_body_closes_the_connection(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a")]), environ={"GATEWAY_API_KEYS": "k-right"})
    head, _ = refused_early(
        gateway.url,
        "authorization: Bearer k-wrong\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n",
        b'{"model": "m", "messages": [',
    )
    assert head.startswith(b"HTTP/1.1 401") and b"connection: close" in head.lower()


def test_a_413_closes_the_connection(fakes: Fakes, start_gateway: StartGateway) -> None:
    config = gateway_config([fakes.start("a")], extra={"server": {"max_body_bytes": 1024}})
    gateway = start_gateway(config)
    head, _ = refused_early(gateway.url, "content-type: application/json\r\ncontent-length: 5000\r\n", b"{" * 100)
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()


@pytest.fixture
def soft_limit() -> Iterator[Callable[[int], None]]:
    """Sets this process's soft open-file limit for the test; the original comes back after."""
    original = resource.getrlimit(resource.RLIMIT_NOFILE)

    def lower(soft: int) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, original[1]))

    yield lower
    resource.setrlimit(resource.RLIMIT_NOFILE, original)


def test_descriptors_running_short_are_logged_once(
    soft_limit: Callable[[int], None], caplog: pytest.LogCaptureFixture
) -> None:
    count = open_descriptors()
    assert count is not None
    soft_limit(count + 40)
    watch = DescriptorWatch()
    assert not watch.check()
    held = [socket.socket() for _ in range(int(WARN_SHARE * (count + 40)) - count + 1)]
    try:
        with caplog.at_level(logging.WARNING, logger="gateway"):
            assert watch.check() and watch.check()
    finally:
        for sock in held:
            sock.close()
    warnings = [r.getMessage() for r in caplog.records if "descriptors running short" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once as they cross the line, not on every check


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(soft_limit: Callable[[int], None]) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = open_descriptors() or 64
    soft_limit(count + 64)
    soft, _ = raise_open_file_limit()
    assert soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft == hard or (hard == resource.RLIM_INFINITY and soft >= 1 << 20)
