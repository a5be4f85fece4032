"""A lean HTTP/1.1 client for the upstream providers: kept-alive connections, one exchange at a time on each.

Why not aiohttp, which the gateway used here before: for each request its client builds a request object, a
response object, a writer, a payload, a stream reader and per-request timers with their context managers, and
that Python work was more than the rest of the exchange cost (``benchmarks/upstream_request.py`` measures the
client alone; the figures are in ``benchmarks/hotpath_notes.md``). Here a request is one write of ready bytes,
and the response is parsed by callbacks into the connection itself. Everything aiohttp did that the gateway
relies on is here: connection reuse, chunked and close-delimited bodies (``httptools``, the same C parser uvicorn serves
with), TLS, connect / per-read / total timeouts, back-pressure on a slow reader, and telling a kept-alive
connection the provider closed as it was reused (the request was never read: ``Closed.before_answer``) from
one that failed mid-answer.

What it does not do, as the gateway never asks for it: redirects, proxies, cookies, decompression (the
gateway asks for ``identity`` and relays bytes), ``Expect: 100-continue``, pipelining.

Errors are this module's own (``WireError`` and its kinds) and carry no traceback or frame of a connection:
``gateway.upstream`` turns them into the gateway's errors with plain words.
"""

from __future__ import annotations

import asyncio
from collections import deque

import httptools

HIGH_WATER = 256 * 1024
"""Bytes received and not yet read past which the connection stops reading from the socket (a slow client of
a long answer): the provider then waits on TCP, not the gateway's memory. Reading resumes below a quarter."""


MAX_HEAD_BYTES = 64 * 1024
"""Bytes a response may send in a row without a byte of body: its head (status line and headers, any interim 1xx
responses included), or a chunked body's trailers. Past it the provider is sending something other than an answer,
and the parser would buffer it without end (as common clients do: 64 KiB, which no provider's headers approach)."""


class WireError(Exception):
    """A failure on the wire. ``before_answer``: no byte of a response had arrived (the request may be resent
    if the connection was a reused one). ``reset``: the peer reset the connection rather than closing it."""

    def __init__(self, message: str, *, before_answer: bool = False, reset: bool = False) -> None:
        super().__init__(message)
        self.before_answer = before_answer
        self.reset = reset


class ConnectFailed(WireError):
    """No connection could be made (refused, unreachable, name not found, TLS refused)."""


class Closed(WireError):
    """The provider closed or reset the connection before the response was complete."""


class Malformed(WireError):
    """The provider's bytes are not an HTTP/1.1 response."""


class WireTimeout(TimeoutError):
    """A wait ran out: ``before_answer`` for the response head, else mid-body; ``at_deadline`` when the exchange's
    total deadline ended it, not the wait for the next bytes (``read_s``)."""

    def __init__(self, *, before_answer: bool, at_deadline: bool = False) -> None:
        super().__init__("timed out")
        self.before_answer = before_answer
        self.at_deadline = at_deadline


class Connection(asyncio.Protocol):
    """One kept-alive TCP (or TLS) connection and the exchange on it; also the response being read.

    The parser's callbacks fill ``_chunks``; whoever waits for bytes parks one future in ``_waiter``, woken by
    the next callback. A failure is kept as its words (``_failure``), never as an exception object: a raised
    exception's traceback would hold the reader's frames, which hold this connection (a cycle per broken stream).
    """

    __slots__ = (
        "_transport",
        "_parser",
        "_waiter",
        "_chunks",
        "_buffered",
        "_paused",
        "_failure",
        "_answered",
        "_lost",
        "_loop",
        "_framing",
        "head_done",
        "complete",
        "status",
        "raw_headers",
        "idle_since",
        "served",
        "read_s",
        "deadline",
        "keep_alive",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[bool] | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._failure: tuple[type[WireError], str, bool, bool] | None = None
        self._answered = False
        self._lost = False
        self._framing = 0
        """Bytes received since the last body bytes, or since the exchange began (``MAX_HEAD_BYTES``)."""
        self.head_done = False
        self.complete = False
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.idle_since = 0.0
        self.served = 0
        """Exchanges completed on this connection: above zero, the connection is a reused one."""
        self.read_s = 0.0
        """The longest wait for any next bytes of the current exchange (its head, or a body's next chunk)."""
        self.deadline = 0.0
        """When the current exchange must be over (``loop.time()``), whatever arrives meanwhile."""
        self.keep_alive = False
        """Whether the response's head lets the connection carry another exchange (HTTP/1.1 without ``Connection:
        close``): read as the head ends, since the parser forgets it once the message is complete."""

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._answered = True
        if self.complete or self._failure is not None:
            # Bytes after a complete response, or while the connection sits in the pool: it cannot be reused.
            self._fail(Malformed, "the provider sent bytes after its response")
            return
        # Counted before the parse, whose body bytes set it back to 0 (``on_body``): one add and one comparison a read.
        self._framing += len(data)
        try:
            self._parser.feed_data(data)
            if self._framing > MAX_HEAD_BYTES and not self.complete:
                if self.head_done:
                    self._fail(
                        Malformed, f"the provider sent {MAX_HEAD_BYTES} bytes of trailers without its body's end"
                    )
                else:
                    self._fail(Malformed, f"the provider's response head passed {MAX_HEAD_BYTES} bytes")
        except httptools.HttpParserUpgrade:
            self._fail(Malformed, "the provider switched protocols")
        except httptools.HttpParserError:
            self._fail(Malformed, "the provider sent a malformed HTTP response")

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed connection cannot carry another exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self.complete or self._failure is not None:
            return
        if self.head_done and exc is None and self._close_delimited():
            self.complete = True  # the body ran to the connection's end, as its head said it would
            self._wake()
            return
        reset = isinstance(exc, ConnectionResetError) or getattr(exc, "errno", None) == 104
        if not self._answered:
            words = "the provider closed the connection before answering"
            if reset:
                words = "the connection to the provider was reset"
            self._fail(Closed, words, before_answer=True, reset=reset)
        else:
            words = (
                "the connection to the provider was reset mid-answer"
                if reset
                else "the provider closed the stream mid-answer"
            )
            self._fail(Closed, words, reset=reset)

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if self.status < 200:  # an interim response (1xx): its headers are not the answer's
            self.raw_headers = []
            return
        self.head_done = True
        self.keep_alive = self._parser.should_keep_alive()
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._framing = 0
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.head_done:
            return  # the end of an interim response
        self.complete = True
        self._wake()

    # the exchange

    @property
    def reusable(self) -> bool:
        """Whether another exchange may go out on this connection now."""
        return (
            not self._lost
            and self._failure is None
            and self._transport is not None
            and not self._transport.is_closing()
        )

    def start(self, request: bytes, read_s: float, deadline: float) -> None:
        """Send one request (head and body in one write) and get ready for its response, which must come with
        no wait longer than ``read_s`` and be over by ``deadline``."""
        self.read_s = read_s
        self.deadline = deadline
        self.head_done = self.complete = self._answered = self.keep_alive = False
        self.status = 0
        self._framing = 0
        self.raw_headers = []
        self._chunks.clear()
        self._buffered = 0
        assert self._transport is not None
        self._transport.write(request)

    async def head(self) -> None:
        """Wait for the response's status line and headers; raises ``WireError`` or ``WireTimeout``."""
        while not self.head_done:
            self._raise_failure()
            await self._wait(before_answer=True)

    def ready(self) -> bytes | None:
        """The body bytes already in (``b""`` at the end), or None when more must be waited for."""
        if self._chunks:
            return self._take()
        if self.complete:
            return b""
        self._raise_failure()
        return None

    async def read(self) -> bytes:
        """The next body bytes as they arrive; ``b""`` at the end."""
        while True:
            chunk = self.ready()
            if chunk is not None:
                return chunk
            await self._wait(before_answer=False)

    def finish(self) -> bool:
        """End this exchange: True when the connection may carry another (the caller pools it), else it is closed."""
        if self.complete and not self._chunks and self.keep_alive and self.reusable:
            self.served += 1
            if self._paused:
                self._paused = False
                assert self._transport is not None
                self._transport.resume_reading()
            return True
        self.close()
        return False

    def close(self) -> None:
        """Drop the connection (an unfinished request is cancelled at the provider by the close).

        Aborted, not closed: a TLS transport's ``close`` sends its close alert and waits (up to half a minute) for
        the provider's, and HTTP/1.1 lets a client close without it (RFC 9112 §9.8); a loop that ends just after
        (a reload's old runtime, shutdown) would leave the socket behind."""
        self._lost = True
        if self._transport is not None:
            self._transport.abort()

    # internals

    def _take(self) -> bytes:
        chunks = self._chunks
        chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if self._paused:
            self._paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        return chunk

    async def _wait(self, *, before_answer: bool) -> None:
        """Park until the next callback, or the read or total deadline, whichever is first (one timer a wait:
        none at all when the bytes were already in)."""
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        gap_ends = loop.time() + self.read_s
        timer = loop.call_at(min(self.deadline, gap_ends), _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if not waiter.result():
            raise WireTimeout(before_answer=before_answer, at_deadline=self.deadline < gap_ends)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _fail(self, kind: type[WireError], words: str, *, before_answer: bool = False, reset: bool = False) -> None:
        if self._failure is None:
            self._failure = (kind, words, before_answer, reset)
        if self._transport is not None:
            self._transport.abort()
        self._wake()

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            kind, words, before_answer, reset = failure
            raise kind(words, before_answer=before_answer, reset=reset)

    def _close_delimited(self) -> bool:
        """Whether this response's body ends where the connection does (no length and not chunked)."""
        for name, _value in self.raw_headers:
            lowered = name.lower()
            if lowered == b"content-length" or lowered == b"transfer-encoding":
                return False
        return True


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


__all__ = [
    "Closed",
    "ConnectFailed",
    "Connection",
    "Malformed",
    "WireError",
    "WireTimeout",
]
