"""Pooled HTTP clients for the upstream providers: what the relay sees of the wire.

Everything outside this module sees only ``UpstreamClient``/``UpstreamResponse`` and the gateway's own
error classes; the wire itself is ``gateway.http1`` (a lean HTTP/1.1 client: its docstring says why not
aiohttp, and before it why not httpx), whose failures are turned here into the most specific
``UpstreamError``, in plain words.

The upstream request carries the provider's key, never the client's, in the header its API
uses (``Authorization: Bearer`` for OpenAI's APIs, ``x-api-key`` for Anthropic's Messages API);
client headers that are hop-by-hop or carry credentials are dropped. ``anthropic-version`` and
``anthropic-beta`` pass through from the client; a Messages request without a version gets
``DEFAULT_ANTHROPIC_VERSION``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import NamedTuple
from urllib.parse import urlsplit

from multidict import CIMultiDict

from gateway import __version__
from gateway.answer_decoding import AnswerDecoder
from gateway.config import ProviderConfig
from gateway.dialects.scans import redactor
from gateway.errors import DeadlinePassed, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.http1 import Connection, WireError, WireTimeout
from gateway.http1_origin import Origin, request_bytes
from gateway.models_config import joined, key_header, split_base
from gateway.request_body import decoded_headers
from gateway.samples import Endpoint

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the gateway sets itself, those of the client's body's
# representation, and those that carry a client's credentials (which must never reach a provider).
_DROPPED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-type",
        # What describes the client's body, not the one forwarded (re-encoded by the gateway, plain).
        "content-encoding",
        "content-md5",
        "digest",
        "content-digest",
        "repr-digest",
        "accept-encoding",
        "authorization",
        "api-key",
        "x-api-key",
        "cookie",
        "expect",
        "forwarded",
    }
)
MAX_ERROR_BODY = 64 * 1024
MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""``[limits] max_answer_bytes``'s default, for a client made without a config."""
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
STALE_RESENDS = 2
"""How many times one request is sent again after a reused connection failed before any answer byte."""


def forwardable_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The client's headers that may go upstream (end-to-end, non-credential ones)."""
    return forwardable_of(decoded_headers(headers))


def forwardable_of(decoded: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``forwardable_headers`` of headers already decoded (``gateway.request_body.decoded_headers``)."""
    # Headers a client names in Connection are hop-by-hop for this connection only (RFC 9110 §7.6.1).
    listed = {token.strip().lower() for name, value in decoded if name == "connection" for token in value.split(",")}
    return [
        (name, value)
        for name, value in decoded
        if name not in _DROPPED_HEADERS and name not in listed and not name.startswith(("x-gateway-", "x-forwarded-"))
    ]


class AttemptTimeouts(NamedTuple):
    """Timeouts of one upstream attempt: ``read_s`` bounds each gap between chunks, ``total_s`` the whole.

    Immutable; a ``NamedTuple``, not a frozen dataclass: one is made per attempt, and a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``."""

    connect_s: float
    read_s: float
    total_s: float


class UpstreamResponse:
    """A response being received from a provider. Whoever opened it closes it (``close``).

    ``close`` before the body was read to the end drops the connection, which cancels the
    request upstream: that is what a client hanging up must cause. It is synchronous (the connection
    goes back to its pool, or is closed, without awaiting anything), hence not ``aclose``.
    """

    __slots__ = ("_connection", "_origin", "provider", "status", "headers", "_decoder", "_max_bytes")

    def __init__(self, connection: Connection, origin: Origin, provider: str, max_bytes: int) -> None:
        self._connection: Connection | None = connection
        self._origin = origin
        self.provider = provider
        self._max_bytes = max_bytes
        """What ``read_all`` reads at most of a whole answer (``[limits] max_answer_bytes``)."""
        self.status: int = connection.status
        self.headers: Mapping[str, str] = CIMultiDict(
            [(name.decode("latin-1"), value.decode("latin-1")) for name, value in connection.raw_headers]
        )
        """Case-insensitive, as HTTP header names are: ``headers.get("retry-after")`` finds ``Retry-After``."""
        coding = (self.headers.get("content-encoding") or "").strip().lower()
        self._decoder = AnswerDecoder(coding) if coding not in ("", "identity") else None

    async def read_chunk(self) -> bytes:
        """The next bytes as they arrive; ``b""`` at the end of the body."""
        connection = self._open()
        try:
            decoder = self._decoder
            if decoder is not None and decoder.pending():
                return decoder.decode(b"")  # what the last read left, before waiting for more
            data = await connection.read()
            if decoder is not None:
                # A compressed piece may decode to nothing yet: read on, as b"" would say the body ended.
                while not (decoded := decoder.decode(data)) and data:
                    data = await connection.read()
                return decoded
            return data
        except (WireError, WireTimeout) as exc:
            raise self._read_error(exc) from None

    def read_ready(self) -> bytes | None:
        """What ``read_chunk`` would return now without waiting: the bytes already in (``b""`` once the body has
        ended), or None when it would wait for more. Raises as ``read_chunk`` does. The relay uses it to arm a
        deadline only around a read that waits."""
        try:
            decoder = self._decoder
            if decoder is not None and decoder.pending():
                return decoder.decode(b"")
            data = self._open().ready()
            if decoder is None or data is None:
                return data
            return decoder.decode(data) or (None if data else b"")
        except WireError as exc:
            raise self._read_error(exc) from None

    def _open(self) -> Connection:
        connection = self._connection
        if connection is None:
            raise UpstreamUnavailable(f"{self.provider}: the response was already closed", provider=self.provider)
        return connection

    def _read_error(self, exc: WireError | WireTimeout) -> UpstreamError:
        if isinstance(exc, WireTimeout):
            if exc.at_deadline:
                return DeadlinePassed(
                    f"{self.provider}: the request's total deadline passed before the answer was complete",
                    provider=self.provider,
                    status=self.status,
                )
            return UpstreamTimeout(
                f"{self.provider}: no data from upstream within the idle timeout",
                provider=self.provider,
                status=self.status,
            )
        return UpstreamUnavailable(f"{self.provider}: {exc}", provider=self.provider, status=self.status)

    async def read_all(self, limit: int | None = None) -> bytes:
        """The whole body, or its first ``limit`` bytes (error bodies: what says why is at their start).

        Without ``limit``, a body larger than the client's ``max_answer_bytes`` (decoded, or as its
        ``Content-Length`` announces) raises ``UpstreamUnavailable``: an endless or huge answer would
        otherwise hold memory until the attempt's total deadline. The caller closes the response, which
        drops the connection (its body was not read to the end). Costs one comparison per read.
        """
        if limit is None:
            declared = self.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self._max_bytes:
                raise self._too_large()
        parts: list[bytes] = []
        size = 0
        while True:
            # Bytes already in are taken without a coroutine: a short answer has usually arrived whole.
            ready = self.read_ready()
            chunk = ready if ready is not None else await self.read_chunk()
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            size += len(chunk)
            if limit is not None:
                if size >= limit:
                    return b"".join(parts)[:limit]
            elif size > self._max_bytes:
                raise self._too_large()

    def _too_large(self) -> UpstreamUnavailable:
        # With its status: the provider's answer, which asking it again would only repeat.
        return UpstreamUnavailable(
            f"{self.provider}: the answer is larger than {self._max_bytes} bytes ([limits] max_answer_bytes)",
            provider=self.provider,
            status=self.status,
            code="upstream_answer_too_large",
        )

    def close(self) -> None:
        """Release the connection: back to the pool if the body was read, else dropped. Closing twice is one close."""
        connection = self._connection
        if connection is not None:
            self._connection = None
            if connection.finish():
                self._origin.release(connection)

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def redirect_words(headers: Mapping[str, str]) -> str:
    """A redirect's target in words for an error (scheme, host and path: its query may carry a token).

    Never followed: the request carries the provider's key, which goes to its base_url and nowhere else."""
    where = urlsplit(headers.get("location", ""))
    return f"a redirect to {where.scheme}://{where.netloc}{where.path}, not followed (check its base_url)"


class UpstreamClient:
    """One provider's pooled client. Create inside the running event loop; close with ``aclose``."""

    def __init__(self, provider: ProviderConfig, api_key: str | None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.provider = provider
        self.max_answer_bytes = max_answer_bytes
        """The largest whole answer ``UpstreamResponse.read_all`` reads (``[limits] max_answer_bytes``)."""
        base: dict[str, str] = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "user-agent": f"gateway/{__version__}",
        }
        base.update(dict(provider.headers))
        anthropic = dict(base)
        if api_key:
            header, value = key_header(provider.api_key_header, api_key)
            base[header] = value
            anthropic["x-api-key"] = api_key
        self._base_headers = base
        self._anthropic_headers = anthropic
        self._secret = api_key.encode() if api_key else None
        self.redact: Callable[[bytes], bytes] = redactor(self._secret)
        """Upstream bytes with this provider's key masked (some providers echo a bad key back): called on every relayed
        chunk, so made once (``gateway.dialects.scans.redactor``: the build's C scan with the key bound, no Python
        frame), not a method."""
        self._origins: dict[str, Origin] = {}
        """Kept-alive connections by scheme, host and port (a provider's APIs may live at different URLs)."""
        self._routes: dict[str, tuple[Origin, str, str]] = {}
        """Each base URL's origin and its path with its query (``?api-version=…``, put after each path), found once."""
        self.thought_signers: set[str] = set()
        """The upstream model ids whose chat answers (to any client: native or translated) carried thought signatures
        (Gemini's): the ones that refuse a tool call sent back without one, and are sent a placeholder where the
        client kept none. Learned from each answer's reading (``AttemptRunner.record``), not configured; a restart
        forgets it until the next signed answer, and so does a reload that moves the provider
        (``gateway.upstream_pool``)."""
        self.refused_fields: set[str] = set()
        """The fields the gateway writes that the provider refused as unknown (its usage ask, a translation's hints),
        which it is not sent again; learned, as ``thought_signers`` is (``gateway.relay.outbound.cured``)."""
        self.short_tool_ids = False
        """The provider refused tool call ids other than nine letters and digits, which it is sent from then on."""
        self.closed = False
        """Set by ``aclose``: the client then refuses new requests (a reload closes the old runtime's clients once
        its last stream is done)."""

    def headers_for(self, api: Endpoint, headers: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
        """The client's forwardable ``headers`` with this provider's own (and its key, as ``api`` carries it)."""
        merged = dict(headers)
        if api == "messages":
            merged.update(self._anthropic_headers)
            merged.setdefault("anthropic-version", DEFAULT_ANTHROPIC_VERSION)
        else:
            merged.update(self._base_headers)
        return merged

    async def send(
        self,
        path: str,
        body: bytes,
        timeouts: AttemptTimeouts,
        headers: Iterable[tuple[str, str]] = (),
        api: Endpoint = "chat",
    ) -> UpstreamResponse:
        """POST ``body`` to the ``api``'s base URL + ``path``; returns once the response headers are in."""
        return await self.request("POST", path, body, timeouts, headers, api)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeouts: AttemptTimeouts,
        headers: Iterable[tuple[str, str]] = (),
        api: Endpoint = "chat",
    ) -> UpstreamResponse:
        """Any request to the ``api``'s base URL + ``path`` (``send`` is its POST); the caller closes the response."""
        merged = self.headers_for(api, headers)
        if body is None:
            merged.pop("content-type", None)
        origin, target = self._target(self.provider.base_url_for(api), path)
        return await self._exchange(origin, request_bytes(method, target, origin.host_header, merged, body), timeouts)

    async def _exchange(self, origin: Origin, request: bytes, timeouts: AttemptTimeouts) -> UpstreamResponse:
        name = self.provider.name
        if self.closed:
            raise RuntimeError(f"{name}: the upstream client is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeouts.total_s
        resends = 0
        while True:
            reused = False
            try:
                connection = await origin.acquire(min(timeouts.connect_s, deadline - loop.time()))
                reused = connection.served > 0
                connection.start(request, timeouts.read_s, deadline)
                try:
                    await connection.head()
                except BaseException:
                    connection.close()  # an unanswered or cancelled exchange leaves the connection unusable
                    raise
                return UpstreamResponse(connection, origin, name, self.max_answer_bytes)
            except WireTimeout:
                raise UpstreamTimeout(f"{name}: upstream did not answer in time", provider=name) from None
            except WireError as exc:
                # Closed or reset before any byte of an answer on a connection kept alive from an earlier
                # request: almost always the provider closing it as it went idle, just as it was reused (the
                # request was never read). Sent again at once, as HTTP allows for a request no response was
                # started for (RFC 9110 9.2.2). A fresh connection's failure is the provider's answer: it
                # may have read the request, and the relay decides (fail over, or retry after a wait).
                if reused and exc.before_answer and resends < STALE_RESENDS:
                    resends += 1
                    continue
                raise UpstreamUnavailable(f"{name}: cannot reach upstream ({exc})", provider=name) from None

    def _target(self, base_url: str, path: str) -> tuple[Origin, str]:
        """The origin of ``base_url`` and the request target of ``path`` under it."""
        route = self._routes.get(base_url)
        if route is None:
            origin = Origin(base_url, self.provider.keepalive_s)
            origin = self._origins.setdefault(origin.key, origin)
            parts = urlsplit(base_url)
            route = self._routes[base_url] = (origin, *split_base(f"{parts.path}?{parts.query}"))
        origin, prefix, query = route
        return origin, joined(prefix, query, path)

    async def aclose(self) -> None:
        self.closed = True
        for origin in self._origins.values():
            origin.close()


__all__ = [
    "AttemptTimeouts",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "forwardable_headers",
    "forwardable_of",
    "redirect_words",
]
