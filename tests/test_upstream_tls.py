"""The upstream client over TLS, against a real TLS server on loopback.

Why: every real provider is HTTPS, and ``tests/test_upstream_wire.py`` pins the wire contract over plain HTTP only.
These tests run ``UpstreamClient`` against the same scripted server with a TLS layer on each accepted connection
(``TLSServer``), with a throwaway CA made at test time (the ``openssl`` CLI: the ``cryptography`` package is not a
dependency). The client trusts that CA as a user with a private CA would: ``SSL_CERT_FILE`` names it, and
``ssl.create_default_context()`` (made once per origin, when its first connection opens) reads it. They pin: answers
framed by Content-Length and by chunks arrive byte-exact over TLS, with ``Host: localhost:<port>``, on one kept-alive
TLS connection; a certificate the client does not trust, or one for another name, is ``UpstreamUnavailable`` in plain
words before any request byte leaves; a body cut short over TLS is the same "closed mid-answer" as over plain TCP;
``aclose`` closes a kept-alive TLS connection without waiting for the provider to answer the TLS close.
Every test runs on asyncio's loop and on uvloop (the gateway's).
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import socket
import ssl
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
import uvloop

from gateway import http1_origin
from gateway.config import ProviderConfig
from gateway.errors import UpstreamUnavailable
from gateway.http1 import Connection
from gateway.upstream import UpstreamClient
from tests.test_upstream_wire import (
    CHAT,
    CHUNKED_BODY,
    CHUNKED_HEAD,
    CHUNKED_WIRE,
    INTERNALS,
    KEY,
    NAME,
    TIMEOUTS,
    Conn,
    Handler,
    Run,
    ScriptedServer,
    keep_alive,
    response,
    until,
)

T = TypeVar("T")

TLS_INTERNALS = (*INTERNALS, "ssl.", "_ssl", "[SSL", "SSL:", "CERTIFICATE_VERIFY_FAILED", "Traceback", "errno")
"""What a message for people must not hold: class names, OpenSSL's reason codes, the C source it failed in."""


# --- a throwaway CA and its certificates ---------------------------------------------------------------------------

CA_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
x509_extensions = ca
[dn]
CN = {name}
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""
LEAF_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = {names}
"""
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Leaf:
    """A server certificate and its key (PEM files)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """The CA the client is told to trust, the server certificates it signed, and another CA."""

    ca: Path
    localhost: Leaf
    """For DNS:localhost and IP:127.0.0.1."""
    dns_only: Leaf
    """For DNS:localhost only: connecting to 127.0.0.1 with it is a name mismatch."""
    other_ca: Path
    """Another private CA: trusting it instead is trusting the wrong CA."""


def openssl(*args: str | Path) -> None:
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"openssl {' '.join(map(str, args))}: {done.stderr}"


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    config = directory / f"{name}.cnf"
    config.write_text(CA_CONFIG.format(name=name))
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    openssl("req", "-x509", "-config", config, *EC_KEY, "-keyout", key, "-out", cert, "-days", "2")
    return cert, key


def make_leaf(directory: Path, name: str, ca: tuple[Path, Path], names: str, serial: int) -> Leaf:
    extensions = directory / f"{name}.ext"
    extensions.write_text(LEAF_EXTENSIONS.format(names=names))
    csr, cert, key = (directory / f"{name}.{suffix}" for suffix in ("csr", "pem", "key"))
    openssl("req", "-new", *EC_KEY, "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    signing: list[str | Path] = ["-CA", ca[0], "-CAkey", ca[1], "-set_serial", str(serial), "-days", "2"]
    openssl("x509", "-req", "-in", csr, *signing, "-extfile", extensions, "-out", cert)
    return Leaf(cert, key)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory, "gateway-test-ca")
    return Pki(
        ca=ca[0],
        localhost=make_leaf(directory, "localhost", ca, "DNS:localhost, IP:127.0.0.1", 2),
        dns_only=make_leaf(directory, "dns-only", ca, "DNS:localhost", 3),
        other_ca=make_ca(directory, "another-ca")[0],
    )


# --- the TLS server ------------------------------------------------------------------------------------------------


class TLSServer(ScriptedServer):
    """``ScriptedServer`` speaking TLS: each accepted socket is wrapped server-side (its handshake) in its
    connection's own thread, then handed to the handler. A handshake that fails is kept in ``refused`` (its words)
    and the handler never runs: no request byte can have been read on that connection."""

    def __init__(self, handler: Handler, leaf: Leaf, host: str) -> None:
        self.refused: list[str] = []
        self.handshakes: list[str] = []
        """Each handshake that completed: the TLS version it agreed on."""
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(leaf.cert, leaf.key)
        super().__init__(handler)
        self.base_url = f"https://{host}:{self.port}/v1"

    def _run(self, conn: Conn) -> None:
        try:
            conn.sock = self.tls.wrap_socket(conn.sock, server_side=True)
        except OSError as exc:  # ssl.SSLError is one; so is the client hanging up mid-handshake
            self.refused.append(str(exc))
            conn.sock.close()
            return
        self.handshakes.append(str(conn.sock.version()))
        super()._run(conn)


class ServeTLS(Protocol):
    def __call__(self, handler: Handler, leaf: Leaf, host: str = "localhost") -> TLSServer: ...


@pytest.fixture
def serve_tls() -> Iterator[ServeTLS]:
    servers: list[TLSServer] = []

    def start(handler: Handler, leaf: Leaf, host: str = "localhost") -> TLSServer:
        servers.append(TLSServer(handler, leaf, host))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> set[Connection]:
    """The client's connections whose transport is open (made and not yet lost), watched through a subclass of
    ``gateway.http1.Connection`` the origins make instead.

    Why: closing a TLS connection is not done when ``transport.close()`` returns, unlike a TCP one: the TLS layer sends
    its close_notify and waits for the provider's (or its EOF). A loop closed meanwhile leaves the socket open (uvloop:
    "Event loop is closed" and ``loop.close()`` failing with EBUSY), so each test waits for its connections to be
    gone before its loop ends. ``test_aclose_closes_a_tls_connection_without_waiting_for_the_provider`` is about
    that wait itself."""
    opened: set[Connection] = set()

    class Watched(Connection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            opened.add(self)

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            opened.discard(self)

    monkeypatch.setattr(http1_origin, "Connection", Watched)
    return opened


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest, live: set[Connection]) -> Run[Any]:
    """Runs a test's coroutine on a fresh event loop of each kind the gateway may run on (as in the wire tests), and
    keeps the loop until the client's connections are closed (``live``)."""

    def go(main: Callable[[], Awaitable[T]]) -> T:
        async def wrapped() -> T:
            result = await main()
            await until(lambda: not live, "the client's connections closed")
            return result

        return uvloop.run(wrapped()) if request.param == "uvloop" else asyncio.run(wrapped())

    return go


@pytest.fixture
def trusted(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> Pki:
    """The client trusts ``pki.ca`` (and only it): ``SSL_CERT_FILE`` names it, as a user with a private CA does.
    OpenSSL reads that file instead of the system's bundle, not besides it."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return pki


def client_of(server: TLSServer) -> UpstreamClient:
    """A client of ``server`` (create inside the running loop, after ``SSL_CERT_FILE`` is set)."""
    return UpstreamClient(ProviderConfig(name=NAME, base_url=server.base_url, keepalive_s=60.0), KEY)


def plain(message: str) -> None:
    """A message for people: no class names, no OpenSSL codes or C sources, no traceback."""
    for word in TLS_INTERNALS:
        assert word not in message, f"{word!r} in {message!r}"


# --- 1. answers over TLS, on one kept-alive connection -------------------------------------------------------------

LARGE = hashlib.sha256(b"tls").digest() * (300 * 1024 // 32)
"""300 KiB: a body spanning many TLS records (16 KiB each at most), above the client's read-pause mark."""


def test_answers_arrive_byte_exact_over_one_kept_alive_tls_connection(
    trusted: Pki, run: Run[Any], serve_tls: ServeTLS
) -> None:
    """A Content-Length answer, then a chunked one streamed in pieces, on the same TLS connection."""
    gate: queue.Queue[None] = queue.Queue()
    pieces = [CHUNKED_HEAD + CHUNKED_WIRE[:12], CHUNKED_WIRE[12:46], CHUNKED_WIRE[46:]]

    def handle(conn: Conn) -> None:
        if conn.read_request() is None or not conn.send(response(LARGE)):
            return
        if conn.read_request() is None:
            return
        for piece in pieces:  # each its own TLS record, each only once the client has read the one before
            gate.get(timeout=10)
            if not conn.send(piece):
                return
        keep_alive()(conn)

    server = serve_tls(handle, trusted.localhost)

    async def go() -> tuple[bytes, list[bytes]]:
        client = client_of(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                assert answer.status == 200
                large = await answer.read_all()
            sending = asyncio.ensure_future(client.send("/chat/completions", CHAT, TIMEOUTS))
            gate.put(None)
            async with await sending as answer:
                assert answer.status == 200
                assert answer.headers["transfer-encoding"] == "chunked"
                streamed: list[bytes] = []
                while chunk := await answer.read_chunk():
                    streamed.append(chunk)
                    gate.put(None)  # the next piece goes out only now: the stream is read as it comes
            return large, streamed
        finally:
            await client.aclose()

    large, streamed = run(go)
    assert large == LARGE
    assert b"".join(streamed) == CHUNKED_BODY
    assert len(streamed) >= len(pieces)  # read piece by piece, not once the whole answer was in
    assert len(server.conns) == 1  # the second request reused the TLS connection
    assert len(server.handshakes) == 1
    assert [request.header("host") for request in server.requests] == [f"localhost:{server.port}"] * 2
    assert [request.body for request in server.requests] == [CHAT, CHAT]
    assert not server.errors


# --- 2-3. certificates the client must refuse ----------------------------------------------------------------------


def refused_before_any_request(server: TLSServer, run: Run[Any]) -> str:
    """The message of the ``UpstreamUnavailable`` one request to ``server`` fails with, having checked that the server
    saw its handshake fail and read no request."""

    async def go() -> str:
        client = client_of(server)
        try:
            with pytest.raises(UpstreamUnavailable) as refused:
                await client.send("/chat/completions", CHAT, TIMEOUTS)
            await until(lambda: server.refused, "the server seeing the handshake fail")
            return str(refused.value)
        finally:
            await client.aclose()

    message: str = run(go)
    assert len(server.conns) == 1  # a refused certificate is not tried again
    assert server.handshakes == []
    assert server.requests == []
    assert not server.errors
    return message


@pytest.mark.parametrize("trust", ["system-cas", "another-ca"])
def test_an_untrusted_certificate_is_upstream_unavailable_in_plain_words(
    trust: str,
    pki: Pki,
    monkeypatch: pytest.MonkeyPatch,
    run: Run[Any],
    serve_tls: ServeTLS,
) -> None:
    """The server's certificate is signed by a CA the client does not trust: with the system's CAs only (no
    ``SSL_CERT_FILE``), or with another private CA."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if trust == "system-cas":
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.other_ca))
    server = serve_tls(keep_alive(), pki.localhost)

    message = refused_before_any_request(server, run)
    assert message.startswith(f"{NAME}: "), message
    assert "certificate" in message, message
    plain(message)


def test_a_certificate_for_another_name_is_upstream_unavailable_in_plain_words(
    trusted: Pki, run: Run[Any], serve_tls: ServeTLS
) -> None:
    """A trusted certificate for DNS:localhost only, reached as https://127.0.0.1: the name does not match."""
    server = serve_tls(keep_alive(), trusted.dns_only, "127.0.0.1")

    message = refused_before_any_request(server, run)
    assert message.startswith(f"{NAME}: "), message
    assert "certificate" in message, message
    assert "127.0.0.1" in message, message
    plain(message)


def test_a_trusted_certificate_for_the_name_is_accepted(trusted: Pki, run: Run[Any], serve_tls: ServeTLS) -> None:
    """The counterpart of the two tests above, so that they cannot pass by every handshake failing: the same
    certificates, reached by a name they are for, are accepted (DNS:localhost-only at localhost, the IP one at
    127.0.0.1)."""
    servers = [
        serve_tls(keep_alive(), trusted.dns_only, "localhost"),
        serve_tls(keep_alive(), trusted.localhost, "127.0.0.1"),
    ]

    async def go() -> list[bytes]:
        answers = []
        for server in servers:
            client = client_of(server)
            try:
                async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                    answers.append(await answer.read_all())
            finally:
                await client.aclose()
        return answers

    assert run(go) == [b'{"ok": true}'] * 2
    assert [server.refused for server in servers] == [[], []]


# --- 4. a body cut short over TLS ----------------------------------------------------------------------------------


@pytest.mark.parametrize("close", ["close-notify", "fin-without-close-notify", "reset"])
def test_a_body_cut_short_over_tls_is_upstream_unavailable_in_plain_words(
    close: str, trusted: Pki, run: Run[Any], serve_tls: ServeTLS
) -> None:
    """Content-Length 100, 10 bytes, then (once the client has read them) the server ends the connection: by TLS's
    close (close_notify, then FIN), by the TCP close alone (a FIN with no close_notify: a truncation TLS can tell),
    or by a reset. A close-notify says the stream ended on purpose, but the answer is still short of its length."""
    script = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n0123456789"
    gate: queue.Queue[None] = queue.Queue()

    def handle(conn: Conn) -> None:
        if conn.read_request() is None or not conn.send(script):
            return
        gate.get(timeout=10)  # the client has read the 10 bytes: a reset can no longer discard them unread
        assert isinstance(conn.sock, ssl.SSLSocket)
        if close == "close-notify":
            conn.sock = conn.sock.unwrap()  # sends close_notify and waits for the client's
            conn.sock.shutdown(socket.SHUT_WR)
            conn.wait_client_close()
        elif close == "fin-without-close-notify":
            conn.sock.shutdown(socket.SHUT_WR)  # the TCP socket's, below TLS
            conn.wait_client_close()
        else:
            conn.close(reset=True)

    server = serve_tls(handle, trusted.localhost)

    async def go() -> tuple[int, bytes, str]:
        client = client_of(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                first = await answer.read_chunk()
                gate.put(None)
                with pytest.raises(UpstreamUnavailable) as cut:
                    await answer.read_all()
            return answer.status, first, str(cut.value)
        finally:
            await client.aclose()

    status, first, message = run(go)
    assert (status, first) == (200, b"0123456789")
    if close == "reset":
        assert message == f"{NAME}: the connection to the provider was reset mid-answer"
    else:
        assert message == f"{NAME}: the provider closed the stream mid-answer"
    plain(message)
    assert len(server.conns) == 1
    assert not server.errors


# --- 5. closing the client ---------------------------------------------------------------------------------------


def test_aclose_closes_a_tls_connection_without_waiting_for_the_provider(
    trusted: Pki, live: set[Connection], run: Run[Any], serve_tls: ServeTLS
) -> None:
    """``aclose`` (the gateway shutting down, or a reload dropping a runtime) closes a kept-alive TLS connection then
    and there, even when the provider does not answer the TLS close: HTTP/1.1 lets a client close without waiting for
    the server's close_notify (RFC 9112 section 9.8). Otherwise the loop ends with the socket still open."""
    hold = threading.Event()

    def handle(conn: Conn) -> None:
        if conn.read_request() is not None and conn.send(response(b'{"ok": true}')):
            hold.wait(4)  # reads nothing more: neither the client's close_notify nor its FIN is answered

    server = serve_tls(handle, trusted.localhost)

    async def go() -> bytes:
        client = client_of(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                body = await answer.read_all()
            assert len(live) == 1  # kept alive
        finally:
            await client.aclose()
        await until(lambda: not live, "the TLS connection closed by aclose", timeout=2.0)
        return body

    try:
        assert run(go) == b'{"ok": true}'
    finally:
        hold.set()
    assert len(server.conns) == 1
