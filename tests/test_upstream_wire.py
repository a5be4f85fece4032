"""The HTTP/1.1 behaviour any upstream client must have, pinned over real loopback sockets.

Why: ``gateway.upstream.UpstreamClient`` is the gateway's one HTTP client to providers; whatever speaks HTTP inside
it (``gateway.http1`` now, aiohttp before it: both passed these), these are the wire facts the relay relies on:
bodies framed by chunks, by Content-Length or by the close arrive byte-exact and end cleanly; a connection is reused
only when HTTP allows it and dropped when a body is left unread; a body cut short, a garbage answer or a stall
become the gateway's own ``UpstreamUnavailable``/``UpstreamTimeout`` in plain words; the request goes out with
exactly the headers it should. Each test drives ``UpstreamClient`` against a small scripted server on a raw socket
(``ScriptedServer``), so that the server side can misbehave below HTTP and count connections; every test runs on
asyncio's loop and on uvloop (the gateway's).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import queue
import socket
import struct
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, TypeVar

import pytest
import uvloop

from gateway.answer_decoding import DECODED_PER_READ
from gateway.config import ProviderConfig
from gateway.errors import UpstreamTimeout, UpstreamUnavailable
from gateway.http1_origin import Origin
from gateway.models_config import under
from gateway.upstream import AttemptTimeouts, UpstreamClient
from tests.support.wait import wait_until

T = TypeVar("T")
Run = Callable[[Callable[[], Awaitable[T]]], T]

TIMEOUTS = AttemptTimeouts(connect_s=2.0, read_s=5.0, total_s=10.0)
CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
KEY = "sk-wire-test"
NAME = "p"
INTERNALS = ("aiohttp", "Error", "message=", "httptools", "llhttp", "HPE_", "Exception")


# --- the scripted server -------------------------------------------------------------------------------------------


@dataclass
class Request:
    """One request as the server read it off the wire."""

    line: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def target(self) -> str:
        return self.line.split(" ")[1]

    def values(self, name: str) -> list[str]:
        """Every value sent under ``name`` (compared case-insensitively)."""
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def header(self, name: str) -> str | None:
        found = self.values(name)
        assert len(found) <= 1, f"{name} sent {len(found)} times: {found}"
        return found[0] if found else None


@dataclass
class Conn:
    """The server's end of one accepted connection; a handler reads requests from it and writes bytes to it."""

    sock: socket.socket
    index: int
    requests: list[Request] = field(default_factory=list)
    client_closed: threading.Event = field(default_factory=threading.Event)
    """Set once the client closed (or reset) its end: a read found EOF."""
    _buffer: bytes = b""

    def _recv(self) -> bytes:
        try:
            piece = self.sock.recv(1 << 20)
        except (ConnectionError, OSError):
            piece = b""
        if not piece:
            self.client_closed.set()
        return piece

    def _read_until(self, marker: bytes) -> bytes | None:
        while marker not in self._buffer:
            piece = self._recv()
            if not piece:
                return None
            self._buffer += piece
        found, _, self._buffer = self._buffer.partition(marker)
        return found

    def _read_exactly(self, size: int) -> bytes | None:
        while len(self._buffer) < size:
            piece = self._recv()
            if not piece:
                return None
            self._buffer += piece
        found, self._buffer = self._buffer[:size], self._buffer[size:]
        return found

    def read_request(self) -> Request | None:
        """The next request on this connection (its body framed as its headers say); None once the client closed."""
        head = self._read_until(b"\r\n\r\n")
        if head is None:
            return None
        line, *rest = head.decode("latin-1").split("\r\n")
        headers = [(name.strip(), value.strip()) for name, _, value in (item.partition(":") for item in rest)]
        request = Request(line, headers, b"")
        if "chunked" in ",".join(request.values("transfer-encoding")).lower():
            while (size_line := self._read_until(b"\r\n")) and (size := int(size_line.split(b";")[0], 16)):
                request.body += (self._read_exactly(size + 2) or b"")[:size]
            while self._read_until(b"\r\n"):  # the trailer, up to its empty line
                pass
        elif lengths := request.values("content-length"):
            body = self._read_exactly(int(lengths[0]))
            if body is None:
                return None
            request.body = body
        self.requests.append(request)
        return request

    def send(self, data: bytes) -> bool:
        """Write ``data``; False when the client has gone."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def wait_client_close(self) -> bool:
        """Read (and drop) whatever comes until the client closes its end; True once it has."""
        while self._recv():
            pass
        return self.client_closed.is_set()

    def close(self, reset: bool = False) -> None:
        if reset:  # SO_LINGER with a zero timeout: close() sends an RST instead of a FIN
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


Handler = Callable[[Conn], None]


class ScriptedServer:
    """A loopback server that runs ``handler`` on each accepted connection, each in a thread of its own.

    ``conns`` lists the connections accepted, in order; the socket is closed when its handler returns."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.conns: list[Conn] = []
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._acceptor = threading.Thread(target=self._accept, name=f"scripted-{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return [request for conn in self.conns for request in conn.requests]

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(10.0)
            with self._lock:
                conn = Conn(sock, len(self.conns))
                self.conns.append(conn)
                thread = threading.Thread(target=self._run, args=(conn,), name=f"conn-{conn.index}", daemon=True)
                self._threads.append(thread)
            thread.start()

    def _run(self, conn: Conn) -> None:
        try:
            self.handler(conn)
        except Exception as exc:  # noqa: BLE001 - kept for the test to see, never lost in a thread
            self.errors.append(exc)
        finally:
            conn.sock.close()

    def stop(self) -> None:
        self.stopping.set()
        self._acceptor.join(5.0)
        self._listener.close()
        with self._lock:
            conns, threads = list(self.conns), list(self._threads)
        for conn in conns:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked in recv
            except OSError:
                pass
        for thread in threads:
            thread.join(5.0)


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(handler: Handler) -> ScriptedServer:
        servers.append(ScriptedServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run[Any]:
    """Runs a test's coroutine on a fresh event loop of each kind the gateway may run on."""

    def go(main: Callable[[], Awaitable[T]]) -> T:
        async def wrapped() -> T:
            return await main()

        return uvloop.run(wrapped()) if request.param == "uvloop" else asyncio.run(wrapped())

    return go


def response(body: bytes = b"{}", *headers: str, status: str = "200 OK", version: str = "HTTP/1.1") -> bytes:
    """A whole response framed by its Content-Length: status line, ``headers`` ("Name: value"), body."""
    lines = [f"{version} {status}", "Content-Type: application/json", *headers, f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def keep_alive(answer: Callable[[Request], bytes] = lambda request: response(b'{"ok": true}')) -> Handler:
    """A handler answering each request on its connection with ``answer(request)`` until the client closes it."""

    def handle(conn: Conn) -> None:
        while (request := conn.read_request()) is not None:
            if not conn.send(answer(request)):
                return

    return handle


def client_for(server: ScriptedServer, key: str | None = KEY) -> UpstreamClient:
    """A client of ``server`` (create inside the running loop)."""
    # A long keep-alive: a connection the pool expires while idle must not pass for one the client closed on purpose.
    return UpstreamClient(ProviderConfig(name=NAME, base_url=server.base_url, keepalive_s=60.0), key)


async def until(condition: Callable[[], object], what: str = "condition", timeout: float = 5.0) -> None:
    """``wait_until`` from inside the loop: the loop keeps running (and seeing its sockets) while it waits."""
    await asyncio.to_thread(wait_until, condition, timeout, what)


async def fetch(client: UpstreamClient, body: bytes = CHAT) -> bytes:
    async with await client.send("/chat/completions", body, TIMEOUTS) as answer:
        assert answer.status == 200
        return await answer.read_all()


async def fetch_twice(server: ScriptedServer) -> list[bytes]:
    """Two answers fetched one after the other by one client (a kept-alive connection may carry both)."""
    client = client_for(server)
    try:
        return [await fetch(client), await fetch(client)]
    finally:
        await client.aclose()


async def got(client: UpstreamClient, path: str) -> tuple[int, bytes]:
    """The status and body of a GET of ``path``."""
    async with await client.request("GET", path, None, TIMEOUTS) as answer:
        return answer.status, await answer.read_all()


def plain(message: str) -> None:
    """A message for people: no class names, no parser internals."""
    for word in INTERNALS:
        assert word not in message, f"{word!r} in {message!r}"


# --- 1. chunked bodies ---------------------------------------------------------------------------------------------

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNKS = [
    (b"data: a\r\n", b""),
    (b'data: {"bbbb": "\\r\\n"}\r\n\r\n', b""),
    (b"data: c\r\n\r\n", b";ext=1"),
    (b"data: d\r\n", b""),
]
CHUNKED_BODY = b"".join(data for data, _ in CHUNKS)
CHUNKED_WIRE = (
    b"".join(b"%x%s\r\n%s\r\n" % (len(data), extension, data) for data, extension in CHUNKS)
    + b"0\r\nX-Trailer: t\r\n\r\n"
)
# Each write goes out only when the test releases it; the framing is split across writes on purpose: a chunk's data
# in two writes, a size line in two, a size line apart from its data, the last chunk apart from the trailer's end.
# Sizes above 9 are hex letters ("1a"), one chunk carries an extension, the last a trailer.
CHUNKED_CUTS = [12, 15, 18, 30, 46, 70, 85, 95]
CHUNKED_WRITES = [
    CHUNKED_HEAD + CHUNKED_WIRE[: CHUNKED_CUTS[0]],
    *(CHUNKED_WIRE[start:end] for start, end in pairwise([*CHUNKED_CUTS, len(CHUNKED_WIRE)])),
]


def whole_chunks(wire: bytes) -> bytes:
    """The data of the chunks whose data has all arrived in ``wire`` (the least a client has handed over by then)."""
    data = b""
    while (line_end := wire.find(b"\r\n")) > 0:
        size = int(wire[:line_end].split(b";")[0], 16)
        if not size or len(wire) < line_end + 2 + size:
            break
        data += wire[line_end + 2 : line_end + 2 + size]
        wire = wire[line_end + 2 + size + 2 :]
    return data


def released_writes(writes: list[bytes], gate: queue.Queue[None], sent: queue.Queue[int]) -> Handler:
    """A handler that, for one request, sends ``writes`` one at a time, each when ``gate`` gives it leave."""

    def handle(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        for index, write in enumerate(writes):
            gate.get(timeout=10)
            if not conn.send(write):
                return
            sent.put(index)
        conn.wait_client_close()

    return handle


@pytest.mark.parametrize("reader", ["read_chunk", "read_all"])
def test_a_chunked_body_arrives_byte_exact_as_its_chunks_come(
    reader: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    gate: queue.Queue[None] = queue.Queue()
    sent: queue.Queue[int] = queue.Queue()
    server = serve(released_writes(CHUNKED_WRITES, gate, sent))

    async def release() -> int:
        gate.put(None)
        return await asyncio.to_thread(sent.get, True, 10)

    async def go() -> tuple[bytes, list[bytes]]:
        client = client_for(server)
        try:
            sending = asyncio.ensure_future(client.send("/chat/completions", CHAT, TIMEOUTS))
            await release()  # the head and the first chunk
            async with await sending as answer:
                assert answer.status == 200
                ends: list[bytes] = []
                if reader == "read_all":
                    reading = asyncio.ensure_future(answer.read_all())
                    for _ in CHUNKED_WRITES[1:]:
                        await release()
                    body = await reading
                else:
                    body = b""
                    for index in range(len(CHUNKED_WRITES)):
                        if index:
                            await release()
                        arrived = len(b"".join(CHUNKED_WRITES[: index + 1])) - len(CHUNKED_HEAD)
                        expected = whole_chunks(CHUNKED_WIRE[:arrived])
                        while len(body) < len(expected):
                            chunk = await answer.read_chunk()
                            assert chunk, f"the body ended early, after {body!r}"
                            body += chunk
                        assert CHUNKED_BODY.startswith(body), body
                ends += [await answer.read_chunk(), await answer.read_chunk()]
                return body, ends
        finally:
            await client.aclose()

    body, ends = run(go)
    assert body == CHUNKED_BODY
    assert ends == [b"", b""]  # the end, and the end again
    assert not server.errors


# --- 2-4. connection reuse by framing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
    ],
    ids=["http1.0", "connection-close"],
)
def test_a_close_delimited_body_arrives_whole_and_the_next_request_opens_a_new_connection(
    head: bytes, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    body = b'{"answer": "' + b"x" * 5000 + b'"}'

    def handle(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        conn.send(head + body[:100])
        conn.send(body[100:])
        conn.sock.shutdown(socket.SHUT_WR)  # the body's end is the close
        conn.wait_client_close()

    server = serve(handle)

    assert run(lambda: fetch_twice(server)) == [body, body]
    assert len(server.conns) == 2
    assert [len(conn.requests) for conn in server.conns] == [1, 1]


def test_a_kept_alive_connection_serves_the_next_request(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    server = serve(keep_alive(lambda request: response(b'{"n": %d}' % len(server.requests))))

    async def go() -> list[bytes]:
        client = client_for(server)
        try:
            return [await fetch(client), await fetch(client), await fetch(client)]
        finally:
            await client.aclose()

    assert run(go) == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']
    assert len(server.conns) == 1
    assert len(server.conns[0].requests) == 3


@pytest.mark.parametrize(
    ("version", "header"),
    [("HTTP/1.1", "Connection: close"), ("HTTP/1.1", "connection: Close"), ("HTTP/1.0", "X-None: 1")],
    ids=["connection-close", "connection-close-case", "http1.0"],
)
def test_a_response_that_says_close_is_not_reused(
    version: str, header: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """The server says the connection ends with this response (and, misbehaving, would still read another request on
    it): the client closes it and sends the next request on a new one."""
    server = serve(keep_alive(lambda request: response(b'{"ok": true}', header, version=version)))

    async def go() -> list[bytes]:
        client = client_for(server)
        try:
            answers = [await fetch(client), await fetch(client)]
            assert len(server.conns) == 2
            await until(lambda: server.conns[0].client_closed.is_set(), "the client closing the first connection")
            return answers
        finally:
            await client.aclose()

    assert run(go) == [b'{"ok": true}', b'{"ok": true}']
    assert [len(conn.requests) for conn in server.conns] == [1, 1]


# --- 5-6. broken answers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n0123456789",
        CHUNKED_HEAD + b"5\r\nhello\r\n",
        CHUNKED_HEAD + b"5\r\nhello\r\na\r\nworld",
    ],
    ids=["content-length", "chunked-between-chunks", "chunked-mid-chunk"],
)
def test_a_body_cut_short_is_upstream_unavailable_in_plain_words(
    script: bytes, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    def handle(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.send(script)
            conn.sock.shutdown(socket.SHUT_WR)  # a FIN before the body's end
            conn.wait_client_close()

    server = serve(handle)

    async def go() -> tuple[int, str, str]:
        client = client_for(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                with pytest.raises(UpstreamUnavailable) as by_read_all:
                    await answer.read_all()
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                with pytest.raises(UpstreamUnavailable) as by_read_chunk:  # noqa: PT012 - the loop is the read
                    while await answer.read_chunk():
                        pass
            return answer.status, str(by_read_all.value), str(by_read_chunk.value)
        finally:
            await client.aclose()

    status, *messages = run(go)
    assert status == 200
    for message in messages:
        assert message == f"{NAME}: the provider closed the stream mid-answer"
        plain(message)
    assert len(server.conns) == 2  # a broken connection is never reused


@pytest.mark.parametrize(
    "script",
    [
        b"HTTP/1.1 abc\r\nContent-Length: 0\r\n\r\n",
        b"hello\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=["bad-status", "not-http", "bad-content-length", "bad-header-line"],
)
def test_a_garbage_response_is_upstream_unavailable_in_plain_words(
    script: bytes, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    def handle(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.send(script)
            conn.wait_client_close()  # held open: the client must not wait for more

    server = serve(handle)

    async def go() -> str:
        client = client_for(server)
        try:
            started = time.monotonic()
            with pytest.raises(UpstreamUnavailable) as info:
                async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                    await answer.read_all()
            assert time.monotonic() - started < TIMEOUTS.read_s  # refused at once, not timed out
            await until(lambda: server.conns[0].client_closed.is_set(), "the client dropping the connection")
            return str(info.value)
        finally:
            await client.aclose()

    message = run(go)
    assert message.startswith(f"{NAME}: ")
    assert message.endswith("the provider sent a malformed HTTP response)")
    plain(message)


# --- 7. response headers -------------------------------------------------------------------------------------------


def test_response_headers_are_read_case_insensitively(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    server = serve(
        keep_alive(
            lambda request: response(
                b'{"error": "slow down"}',
                "Retry-After: 3",
                "X-RateLimit-Remaining-Requests: 5",
                "x-request-id: req-1",
                status="429 Too Many Requests",
            )
        )
    )

    async def go() -> tuple[int, list[str | None], bool, dict[str, str], bytes]:
        client = client_for(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                headers = answer.headers
                looked_up = [
                    headers.get("retry-after"),
                    headers.get("RETRY-AFTER"),
                    headers.get("x-ratelimit-remaining-requests"),
                    headers.get("X-Request-Id"),
                    headers["content-type"],
                    headers.get("x-absent"),
                ]
                items = dict(headers.items())
                return answer.status, looked_up, "Retry-After" in headers, items, await answer.read_all()
        finally:
            await client.aclose()

    status, looked_up, contained, items, body = run(go)
    assert status == 429
    assert looked_up == ["3", "3", "5", "req-1", "application/json", None]
    assert contained
    assert {name.lower(): value for name, value in items.items()} == {
        "content-type": "application/json",
        "retry-after": "3",
        "x-ratelimit-remaining-requests": "5",
        "x-request-id": "req-1",
        "content-length": str(len(body)),
    }
    assert body == b'{"error": "slow down"}'


# --- 8. large bodies -----------------------------------------------------------------------------------------------


def test_a_large_request_body_arrives_byte_exact(run: Run[Any], serve: Callable[[Handler], ScriptedServer]) -> None:
    history = [{"role": "user", "content": f"turn {i}: " + "é" * 1000} for i in range(1600)]
    body = json.dumps({"model": "m", "messages": history}, ensure_ascii=False).encode()
    assert len(body) > 3 * 1024 * 1024
    server = serve(keep_alive())

    async def go() -> list[bytes]:
        client = client_for(server)
        try:
            return [await fetch(client, body), await fetch(client, b"{}")]
        finally:
            await client.aclose()

    assert run(go) == [b'{"ok": true}', b'{"ok": true}']
    first, second = server.requests
    assert first.header("content-length") == str(len(body))
    assert first.header("transfer-encoding") is None
    assert hashlib.sha256(first.body).hexdigest() == hashlib.sha256(body).hexdigest()
    assert second.body == b"{}"  # the next request on the connection starts where the large one ended


def test_a_large_response_body_reaches_a_slow_reader_byte_exact(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    block = hashlib.sha256(b"wire").digest() * 2048  # 64 KiB
    body = b"".join(bytes([i]) + block[1:] for i in range(80))  # 5 MiB; each block starts with its own index
    server = serve(keep_alive(lambda request: response(body)))

    async def go() -> tuple[bytes, int]:
        client = client_for(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                got: list[bytes] = []
                while chunk := await answer.read_chunk():
                    got.append(chunk)
                    await asyncio.sleep(0.001)  # a slow reader (pacing, not synchronisation)
                return b"".join(got), len(got)
        finally:
            await client.aclose()

    got, reads = run(go)
    assert len(got) == len(body) and got == body
    assert reads > 1


def test_a_reader_that_stops_reading_stops_the_socket_not_the_memory(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """A slow client of a long answer: the connection stops reading from its socket once a bounded amount waits
    unread, so the provider's send blocks on TCP instead of the gateway buffering the whole answer."""
    total = 64 * 1024 * 1024
    blocked = threading.Event()

    def handle(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        conn.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        conn.sock.settimeout(2.0)  # a send that cannot go on for this long: the client stopped reading
        piece, sent = b"x" * 65536, 0
        try:
            while sent < total:
                conn.sock.sendall(piece)
                sent += len(piece)
        except TimeoutError:
            blocked.set()

    server = serve(handle)

    async def go() -> int:
        client = client_for(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                await answer.read_chunk()
                # The loop runs on (its sockets read) while this task waits for the provider to be held back.
                assert await asyncio.to_thread(blocked.wait, 20.0), "the provider was never held back"
                unread = 0
                while chunk := answer.read_ready():
                    unread += len(chunk)
                return unread
        finally:
            await client.aclose()

    assert run(go) < 1024 * 1024


# --- 9. timeouts ---------------------------------------------------------------------------------------------------


def silent(conn: Conn) -> None:
    """Read the request, answer nothing, until the client closes."""
    if conn.read_request() is not None:
        conn.wait_client_close()


def test_no_head_within_read_s_is_upstream_timeout_from_send(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    server = serve(silent)

    async def go() -> tuple[str, float]:
        client = client_for(server)
        try:
            started = time.monotonic()
            with pytest.raises(UpstreamTimeout) as info:
                await client.send("/chat/completions", CHAT, AttemptTimeouts(connect_s=2, read_s=0.2, total_s=5))
            took = time.monotonic() - started
            await until(lambda: server.conns[0].client_closed.is_set(), "the timed-out connection dropped")
            return str(info.value), took
        finally:
            await client.aclose()

    message, took = run(go)
    assert message == f"{NAME}: upstream did not answer in time"
    assert 0.15 < took < 2.0


def test_a_stall_mid_body_longer_than_read_s_is_upstream_timeout_from_read_chunk(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    def handle(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.send(CHUNKED_HEAD + b"7\r\ndata: a\r\n")
            conn.wait_client_close()

    server = serve(handle)

    async def go() -> tuple[bytes, str, float]:
        client = client_for(server)
        try:
            timeouts = AttemptTimeouts(connect_s=2, read_s=0.3, total_s=5)
            async with await client.send("/chat/completions", CHAT, timeouts) as answer:
                got = b""
                while len(got) < 7:
                    got += await answer.read_chunk()
                started = time.monotonic()
                with pytest.raises(UpstreamTimeout) as info:
                    await answer.read_chunk()
                took = time.monotonic() - started
            await until(lambda: server.conns[0].client_closed.is_set(), "the stalled connection dropped")
            return got, str(info.value), took
        finally:
            await client.aclose()

    got, message, took = run(go)
    assert got == b"data: a"
    assert message == f"{NAME}: no data from upstream within the idle timeout"
    assert 0.2 < took < 2.0


@pytest.mark.parametrize("where", ["head", "body"])
def test_total_s_bounds_a_trickling_answer(
    where: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """A byte every 0.05 s never trips read_s (5 s) but the whole attempt must end at total_s (0.5 s)."""

    def handle(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        if where == "body":
            conn.send(CHUNKED_HEAD)
        else:
            conn.send(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        trickle = b"1\r\nx\r\n" if where == "body" else b"x"
        ends = time.monotonic() + 4.0  # "forever" for the client; bounded so that a failing client fails fast
        while time.monotonic() < ends and not server.stopping.is_set() and conn.send(trickle):
            time.sleep(0.05)  # the trickle's pace, not a wait for anything

    server = serve(handle)

    async def go() -> float:
        client = client_for(server)
        started = time.monotonic()
        try:
            with pytest.raises(UpstreamTimeout):  # noqa: PT012 - from send or from a read, whichever
                async with await client.send(
                    "/chat/completions", CHAT, AttemptTimeouts(connect_s=2, read_s=5, total_s=0.5)
                ) as answer:
                    while await answer.read_chunk():
                        pass
            return time.monotonic() - started
        finally:
            await client.aclose()

    took = run(go)
    assert 0.4 < took < 2.0


# --- 10. GET -------------------------------------------------------------------------------------------------------


def test_a_get_sends_no_body_and_reads_status_and_body(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    models = b'{"object": "list", "data": [{"id": "m"}]}'

    def answer(request: Request) -> bytes:
        if request.target == "/v1/missing":
            return response(b'{"error": "no"}', status="404 Not Found")
        return response(models)

    server = serve(keep_alive(answer))

    async def go() -> list[tuple[int, bytes]]:
        client = client_for(server)
        try:
            return [await got(client, "/models"), await got(client, "/models"), await got(client, "/missing")]
        finally:
            await client.aclose()

    assert run(go) == [(200, models), (200, models), (404, b'{"error": "no"}')]
    requests = server.requests
    assert [r.line for r in requests] == ["GET /v1/models HTTP/1.1"] * 2 + ["GET /v1/missing HTTP/1.1"]
    first = requests[0]
    assert first.header("content-type") is None
    assert first.header("transfer-encoding") is None
    assert first.header("content-length") in (None, "0")
    assert first.body == b""
    assert first.header("authorization") == f"Bearer {KEY}"
    # Each request line was read where the one before ended: no stray body bytes between them.
    assert len(server.conns) == 1


# --- 11. close() ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("read", ["unread", "read"])
def test_close_drops_an_unread_connection_and_keeps_a_read_one(
    read: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    whole = b"y" * 20_000

    def handle(conn: Conn) -> None:
        while conn.read_request() is not None:
            if conn.index == 0 and len(conn.requests) == 1 and read == "unread":
                # The head and a part; the rest would follow, but the client hangs up first.
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"z" * 100)
            elif not conn.send(response(whole)):
                return

    server = serve(handle)

    async def go() -> bytes:
        client = client_for(server)
        try:
            answer = await client.send("/chat/completions", CHAT, TIMEOUTS)
            if read == "unread":
                assert await answer.read_chunk()
                answer.close()
                await until(lambda: server.conns[0].client_closed.is_set(), "the server seeing the unread one dropped")
            else:
                assert await answer.read_all() == whole
                answer.close()
            return await fetch(client)
        finally:
            await client.aclose()

    assert run(go) == whole
    assert len(server.conns) == (2 if read == "unread" else 1)
    assert [len(conn.requests) for conn in server.conns] == ([1, 1] if read == "unread" else [2])


# --- 12. a pooled connection the server closed ---------------------------------------------------------------------


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
@pytest.mark.parametrize("when", ["idle", "reused"])
def test_a_pooled_connection_the_server_closed_does_not_fail_the_next_request(
    when: str, reset: bool, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """A provider closes a kept-alive connection when it has sat idle: ``idle``, the close is in before the next request
    (the client must not send on it, or must send again); ``reused``, the close comes as the next request arrives, which
    the server never answers (the request was not acted on: it goes again at once, on a new connection)."""
    cue = threading.Event()
    closed = threading.Event()

    def handle(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        conn.send(response(b'{"n": %d}' % conn.index, "Connection: keep-alive"))
        if conn.index == 0:
            if when == "idle":
                assert cue.wait(10)  # the client has read the answer: now the server's idle close
            else:
                assert conn.read_request() is not None  # the reuse, read and never answered
            conn.close(reset=reset)
            closed.set()
        else:
            keep_alive(lambda request: response(b'{"n": %d}' % conn.index))(conn)

    server = serve(handle)

    async def go() -> list[bytes]:
        client = client_for(server)
        try:
            first = await fetch(client)
            if when == "idle":
                cue.set()
                await until(closed.is_set, "the server closing the idle connection")
            return [first, await fetch(client), await fetch(client)]
        finally:
            await client.aclose()

    assert run(go) == [b'{"n": 0}', b'{"n": 1}', b'{"n": 1}']
    assert [len(conn.requests) for conn in server.conns] == ([1, 2] if when == "idle" else [2, 2])


# --- 13. concurrency -----------------------------------------------------------------------------------------------


def test_concurrent_requests_each_get_their_own_answer(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """32 requests in flight at once (the server holds every answer until all 32 are in), then 32 more on the
    connections the first left in the pool: each answer echoes its own request's tag and body."""
    together = threading.Barrier(32, timeout=10)

    def answer(request: Request) -> bytes:
        if len(server.requests) <= 32:
            together.wait()
        tag = request.header("x-request-tag") or "none"
        return response(json.dumps({"tag": tag, "body": request.body.decode()}).encode())

    server = serve(keep_alive(answer))

    async def one(client: UpstreamClient, tag: str) -> tuple[str, dict[str, str]]:
        body = json.dumps({"model": "m", "n": tag}).encode()
        async with await client.send("/chat/completions", body, TIMEOUTS, [("x-request-tag", tag)]) as got:
            return body.decode(), json.loads(await got.read_all())

    async def go() -> list[tuple[str, dict[str, str]]]:
        client = client_for(server)
        try:
            first = await asyncio.gather(*(one(client, f"a{i}") for i in range(32)))
            second = await asyncio.gather(*(one(client, f"b{i}") for i in range(32)))
            return [*first, *second]
        finally:
            await client.aclose()

    answers = run(go)
    tags = [f"a{i}" for i in range(32)] + [f"b{i}" for i in range(32)]
    assert [got for _, got in answers] == [
        {"tag": tag, "body": sent} for tag, (sent, _) in zip(tags, answers, strict=True)
    ]
    assert [json.loads(sent)["n"] for sent, _ in answers] == tags
    assert len(server.conns) == 32  # the second round reused the first round's connections
    assert not server.errors


# --- 14. the request on the wire -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_the_request_line_and_headers_the_server_receives(
    api: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    server = serve(keep_alive())
    path = "/chat/completions" if api == "chat" else "/messages"
    sent = [("user-agent", "client/1.0"), ("X-Request-Tag", "t1"), ("accept-encoding", "br")]

    async def go() -> None:
        client = client_for(server)
        try:
            async with await client.send(path, CHAT, TIMEOUTS, sent, api="chat" if api == "chat" else "messages"):
                pass
        finally:
            await client.aclose()

    run(go)
    (request,) = server.requests
    assert request.line == f"POST /v1{path} HTTP/1.1"
    names = [name.lower() for name, _ in request.headers]
    assert len(names) == len(set(names)), f"a header sent twice: {names}"
    assert request.header("host") == f"127.0.0.1:{server.port}"
    assert request.header("content-length") == str(len(CHAT))
    assert request.header("transfer-encoding") is None
    assert request.body == CHAT
    assert request.header("content-type") == "application/json"
    assert request.header("x-request-tag") == "t1"
    assert (request.header("user-agent") or "").startswith("gateway/")
    assert request.header("accept-encoding") == "identity"
    if api == "chat":
        assert request.header("authorization") == f"Bearer {KEY}"
        assert request.header("x-api-key") is None
    else:
        assert request.header("x-api-key") == KEY
        assert request.header("authorization") is None
        assert request.header("anthropic-version") == "2023-06-01"


# --- 15. aclose ----------------------------------------------------------------------------------------------------


def test_aclose_closes_the_kept_alive_connections(run: Run[Any], serve: Callable[[Handler], ScriptedServer]) -> None:
    server = serve(keep_alive())

    async def go() -> None:
        client = client_for(server)
        try:
            await asyncio.gather(fetch(client), fetch(client), fetch(client))
            await until(lambda: len(server.requests) == 3, "three requests answered")
            assert not any(conn.client_closed.is_set() for conn in server.conns)
        finally:
            await client.aclose()
        await until(lambda: all(conn.client_closed.is_set() for conn in server.conns), "every connection closed")

    run(go)
    assert len(server.conns) == 3


# --- the pool after a burst, and the Host header ----------------------------------------------------------------------


def test_a_bursts_idle_connections_are_closed_once_past_keepalive_while_requests_still_flow(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """Eight concurrent requests leave eight kept-alive connections; one request at a time then reuses only the
    newest, and the seven below it are closed once idle past ``keepalive_s`` (not held until the provider drops
    them)."""
    arrived = threading.Barrier(8, timeout=5.0)

    def burst_then_steady(request: Request) -> bytes:
        if len(server.requests) <= 8:
            arrived.wait()  # all eight in flight at once: eight connections
        return response(b'{"ok": true}')

    server = serve(keep_alive(burst_then_steady))
    keepalive_s = 0.3

    async def go() -> None:
        client = UpstreamClient(ProviderConfig(name=NAME, base_url=server.base_url, keepalive_s=keepalive_s), KEY)
        try:
            await asyncio.gather(*(fetch(client) for _ in range(8)))
            assert len(server.conns) == 8
            loop = asyncio.get_running_loop()
            until_s = loop.time() + keepalive_s * 2  # the seven idle ones then outlive keepalive_s
            while loop.time() < until_s:
                await fetch(client)
            await until(lambda: sum(conn.client_closed.is_set() for conn in server.conns) == 7, "seven closed")
            assert len(server.conns) == 8  # the steady requests all went out on the one kept connection
        finally:
            await client.aclose()

    run(go)


@pytest.mark.parametrize(
    ("base_url", "host_header", "port"),
    [
        ("http://[::1]/v1", "[::1]", 80),
        ("https://[2001:db8::1]:8443/v1", "[2001:db8::1]:8443", 8443),
        ("https://api.example.com/v1", "api.example.com", 443),
        ("http://127.0.0.1:9000/v1", "127.0.0.1:9000", 9000),
    ],
)
def test_the_host_header_names_the_origin_as_http_spells_it(base_url: str, host_header: str, port: int) -> None:
    """The default port is left out, and an IPv6 address keeps its brackets with or without a port."""
    origin = Origin(base_url, keepalive_s=4.0)
    assert (origin.host_header, origin.port) == (host_header, port)


# --- compressed answers (a provider that ignores ``Accept-Encoding: identity``) -------------------------------------

SSE_EVENTS = [b'data: {"n": %d, "text": "%s"}\n\n' % (n, b"word " * n) for n in range(40)] + [b"data: [DONE]\n\n"]


def _compressed(coding: str, plain_body: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(plain_body)
    return zlib.compress(plain_body)  # HTTP's "deflate": a zlib stream


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_stream_arrives_as_its_plain_bytes_piece_by_piece(
    coding: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """Each event compressed and flushed as it is sent, as a streaming server does, in chunks of a few bytes: the
    reader gets the plain stream byte-exact, never an empty piece before the end (which would end it early)."""
    plain_body = b"".join(SSE_EVENTS)

    def handle(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: {coding}\r\n"
        conn.send(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n")
        packer = zlib.compressobj(wbits=31 if coding == "gzip" else 15)
        for event in SSE_EVENTS:
            piece = packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH)
            for start in range(0, len(piece), 7):  # a gzip header split across chunks, too
                part = piece[start : start + 7]
                conn.send(b"%x\r\n%s\r\n" % (len(part), part))
        tail = packer.flush()
        conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
        conn.wait_client_close()

    server = serve(handle)

    async def go() -> list[bytes]:
        client = client_for(server)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                pieces = []
                while piece := await answer.read_chunk():
                    pieces.append(piece)
                return pieces
        finally:
            await client.aclose()

    pieces = run(go)
    assert b"".join(pieces) == plain_body
    assert len(pieces) > 1


@pytest.mark.parametrize("coding", ["gzip", "deflate", "GZIP"])
def test_a_compressed_whole_answer_reads_as_its_plain_bytes_and_the_connection_is_reused(
    coding: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    body = json.dumps({"choices": [{"message": {"content": "hello " * 200}}]}).encode()
    packed = response(_compressed(coding.lower(), body), f"Content-Encoding: {coding}")
    server = serve(keep_alive(lambda request: packed))

    assert run(lambda: fetch_twice(server)) == [body, body]
    assert len(server.conns) == 1


@pytest.mark.parametrize("whole", [True, False], ids=["read_all", "read_chunk"])
def test_a_small_compressed_answer_that_holds_a_huge_one_is_decoded_a_bounded_piece_at_a_time(
    whole: bool, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    """32 KiB of gzip that holds 32 MiB (a bomb): no read yields more than ``DECODED_PER_READ``, so ``read_all``'s
    bound (``max_answer_bytes``) stops it within that much, and a reader read by read gets it all, byte-exact."""
    plain_body = b"0" * (32 << 20)
    packed = response(gzip.compress(plain_body), "Content-Encoding: gzip")
    server = serve(keep_alive(lambda request: packed))

    async def go() -> tuple[list[int], str]:
        client = UpstreamClient(ProviderConfig(name=NAME, base_url=server.base_url), None, max_answer_bytes=4 << 20)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as answer:
                if whole:
                    with pytest.raises(UpstreamUnavailable) as info:
                        await answer.read_all()
                    return [], str(info.value)
                sizes = []
                while piece := await answer.read_chunk():
                    assert piece == plain_body[: len(piece)]
                    sizes.append(len(piece))
                return sizes, ""
        finally:
            await client.aclose()

    sizes, message = run(go)
    if whole:
        assert "larger than 4194304 bytes" in message
    else:
        assert sum(sizes) == len(plain_body)
        assert max(sizes) <= DECODED_PER_READ


@pytest.mark.parametrize(
    ("coding", "payload", "words"),
    [
        ("br", b"\x1b\x03\x00\xf8\xa5\x40\x42", "content-encoding 'br', which the gateway cannot read"),
        ("gzip", b"\x1f\x8b\x08\x00not gzip at all", "the compressed answer could not be read"),
    ],
)
def test_an_answer_the_gateway_cannot_decompress_is_upstream_unavailable_in_plain_words(
    coding: str, payload: bytes, words: str, run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    server = serve(keep_alive(lambda request: response(payload, f"Content-Encoding: {coding}")))

    async def go() -> str:
        client = client_for(server)
        try:
            with pytest.raises(UpstreamUnavailable) as info:
                await fetch(client)
            return str(info.value)
        finally:
            await client.aclose()

    message = run(go)
    assert message.startswith(f"{NAME}: ") and words in message
    plain(message)


# --- a base URL with a query, and the key in a header of the provider's choosing (Azure OpenAI) ---------------------


def test_a_base_url_query_follows_every_path_and_the_key_goes_in_the_header_named(
    run: Run[Any], serve: Callable[[Handler], ScriptedServer]
) -> None:
    server = serve(keep_alive())
    base_url = f"http://127.0.0.1:{server.port}/openai/deployments/gpt-4o?api-version=2024-10-21"

    async def go() -> None:
        provider = ProviderConfig(name=NAME, base_url=base_url, api_key_header="api-key")
        client = UpstreamClient(provider, KEY)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS):
                pass
            await got(client, "/models?limit=5")
        finally:
            await client.aclose()

    run(go)
    post, get = server.requests
    assert post.line == "POST /openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21 HTTP/1.1"
    assert get.line == "GET /openai/deployments/gpt-4o/models?limit=5&api-version=2024-10-21 HTTP/1.1"
    for request in (post, get):
        assert request.header("api-key") == KEY
        assert request.header("authorization") is None


@pytest.mark.parametrize(
    ("base_url", "path", "url"),
    [
        ("https://h/v1", "/chat/completions", "https://h/v1/chat/completions"),
        ("https://h/v1/", "/models", "https://h/v1/models"),
        ("https://h/d?api-version=1", "/chat/completions", "https://h/d/chat/completions?api-version=1"),
        ("https://h/d/?api-version=1", "/models?limit=5", "https://h/d/models?limit=5&api-version=1"),
        ("/d?v=1", "/messages", "/d/messages?v=1"),
    ],
)
def test_a_path_under_a_base_url_keeps_the_base_urls_query_last(base_url: str, path: str, url: str) -> None:
    assert under(base_url, path) == url
