"""Pooled HTTP clients for the upstream providers, and (with ``gateway.upstream_reuse``) the one place aiohttp is known.

Why aiohttp: measured on a 2-core machine, a passthrough built on httpx fell from ~570 to ~150
streamed requests/s between concurrency 1 and 64 and added seconds to first-token time at 256
paced streams (its connection pool serialises under load); the same passthrough on aiohttp
held the direct rate at ~0.3 ms CPU per request. Everything outside these modules sees only
``UpstreamClient``/``UpstreamResponse`` and the gateway's own error classes: aiohttp's
exceptions are translated here, at the boundary, to the most specific ``UpstreamError``.

The upstream request carries the provider's key, never the client's, in the header its API
uses (``Authorization: Bearer`` for OpenAI's APIs, ``x-api-key`` for Anthropic's Messages API);
client headers that are hop-by-hop or carry credentials are dropped. ``anthropic-version`` and
``anthropic-beta`` pass through from the client; a Messages request without a version gets
``DEFAULT_ANTHROPIC_VERSION``.
"""

from __future__ import annotations

import errno
import io
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import NamedTuple

import aiohttp

from gateway import __version__
from gateway.config import GatewayConfig, ProviderConfig
from gateway.dialects.scans import redactor
from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.request_body import decoded_headers
from gateway.samples import Endpoint
from gateway.upstream_reuse import REUSED, STALE_RESENDS, ReuseMarkingConnector, never_read, unwritten

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the gateway sets itself or that carry a
# client's credentials (which must never reach a provider).
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
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
LARGE_BODY_BYTES = 1024 * 1024
"""Request bodies above this go to aiohttp as a file-like object (it warns on, and copies, larger bytes)."""


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
    request upstream: that is what a client hanging up must cause. It is synchronous (aiohttp
    releases or drops a connection without awaiting anything), hence not ``aclose``.
    """

    __slots__ = ("_response", "provider", "status", "headers")

    def __init__(self, response: aiohttp.ClientResponse, provider: str) -> None:
        self._response = response
        self.provider = provider
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read_chunk(self) -> bytes:
        """The next bytes as they arrive; ``b""`` at the end of the body."""
        try:
            return await self._response.content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._read_error(exc) from exc

    def read_ready(self) -> bytes | None:
        """What ``read_chunk`` would return now without waiting: the bytes already in (``b""`` once the body has
        ended), or None when it would wait for more. Raises as ``read_chunk`` does.

        aiohttp's ``readany`` is ``read_nowait`` once its buffer holds bytes or the body has ended; both raise the
        reader's stored error first. The relay uses it to arm a deadline only around a read that waits."""
        content = self._response.content
        try:
            chunk = content.read_nowait()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._read_error(exc) from exc
        return chunk if chunk or content.is_eof() else None

    def _read_error(self, exc: BaseException) -> UpstreamError:
        if isinstance(exc, TimeoutError):
            return UpstreamTimeout(
                f"{self.provider}: no data from upstream within the idle timeout",
                provider=self.provider,
                status=self.status,
            )
        _shed_frames(exc)
        return UpstreamUnavailable(
            f"{self.provider}: {describe_transport_error(exc, mid_answer=True)}",
            provider=self.provider,
            status=self.status,
        )

    async def read_all(self, limit: int | None = None) -> bytes:
        """The whole body (or its first ``limit`` bytes, for error bodies)."""
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
            if limit is not None and size >= limit:
                return b"".join(parts)[:limit]

    def close(self) -> None:
        """Release the connection: back to the pool if the body was read, else dropped."""
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _shed_frames(exc: BaseException) -> None:
    """Drop the tracebacks of an aiohttp error and of the errors it chains.

    aiohttp keeps a broken response's error on its reader, and the error's traceback keeps the reader's
    frames: a cycle per broken stream (about 2 MB per provider death, left to the collector's rare full
    passes). Its message and type are all the gateway reads of it.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        error.__traceback__ = None
        pending += [error.__cause__, error.__context__]


class UpstreamClient:
    """One provider's pooled client. Create inside the running event loop; close with ``aclose``."""

    def __init__(self, provider: ProviderConfig, api_key: str | None) -> None:
        self.provider = provider
        connector = ReuseMarkingConnector(
            # The router keeps in-flight requests under max_concurrency (and its learned limit);
            # the slack covers hedged and cancelled attempts whose connections are still closing.
            # No ceiling: no pool limit (0), the learned limit alone bounds the connections.
            limit=provider.max_concurrency + 16 if provider.max_concurrency is not None else 0,
            limit_per_host=0,
            keepalive_timeout=provider.keepalive_s,
            ttl_dns_cache=300,
        )
        # No ``skip_auto_headers``: every request carries its own user-agent and accept-encoding (below), so
        # aiohttp adds none of its own, and a skip list would cost each request a sorted copy of its headers.
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        base: dict[str, str] = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "user-agent": f"gateway/{__version__}",
        }
        base.update(dict(provider.headers))
        anthropic = dict(base)
        if api_key:
            base["authorization"] = f"Bearer {api_key}"
            anthropic["x-api-key"] = api_key
        self._base_headers = base
        self._anthropic_headers = anthropic
        self._secret = api_key.encode() if api_key else None
        self.redact: Callable[[bytes], bytes] = redactor(self._secret)
        """Upstream bytes with this provider's key masked (some providers echo a bad key back): called on every relayed
        chunk, so made once (``gateway.dialects.scans.redactor``: the build's C scan with the key bound, no Python
        frame), not a method."""

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
        timeout = aiohttp.ClientTimeout(
            total=timeouts.total_s, sock_connect=timeouts.connect_s, sock_read=timeouts.read_s
        )
        name = self.provider.name
        url = self.provider.base_url_for(api) + path
        try:
            resends = 0
            while True:
                REUSED.set(False)
                try:
                    response = await self._session.request(
                        method, url, data=_sendable(body), headers=merged, timeout=timeout, allow_redirects=False
                    )
                    break
                except aiohttp.ClientError as exc:
                    # Closed or reset before any byte of an answer on a connection kept alive from an earlier
                    # request: almost always the provider closing it as it went idle, just as it was reused (the
                    # request was never read). Sent again at once, as HTTP allows for a request no response was
                    # started for (RFC 9110 9.2.2). A fresh connection's failure is the provider's answer: it
                    # may have read the request, and the relay decides (fail over, or retry after a wait).
                    if resends >= STALE_RESENDS or not REUSED.get() or not never_read(exc):
                        raise
                    resends += 1
        except TimeoutError as exc:
            raise UpstreamTimeout(f"{name}: upstream did not answer in time", provider=name) from exc
        except aiohttp.ClientError as exc:
            _shed_frames(exc)
            raise UpstreamUnavailable(
                f"{name}: cannot reach upstream ({describe_transport_error(exc)})", provider=name
            ) from exc
        return UpstreamResponse(response, name)

    async def get(self, path: str, timeout_s: float) -> tuple[int, bytes]:
        """A small GET (model lists, health probes)."""
        try:
            async with self._session.get(
                self.provider.base_url + path,
                headers=self._base_headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                return response.status, await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamUnavailable(
                f"{self.provider.name}: {describe_transport_error(exc)}", provider=self.provider.name
            ) from exc

    async def aclose(self) -> None:
        await self._session.close()


class UpstreamPool:
    """Every provider's client, keyed by provider name. Owned by the app's lifespan."""

    def __init__(self, clients: Mapping[str, UpstreamClient]) -> None:
        self.clients = dict(clients)

    @classmethod
    def from_config(cls, config: GatewayConfig, keys: Mapping[str, str | None]) -> UpstreamPool:
        return cls({p.name: UpstreamClient(p, keys.get(p.name)) for p in config.providers})

    def __getitem__(self, provider: str) -> UpstreamClient:
        return self.clients[provider]

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


def describe_transport_error(exc: BaseException, *, mid_answer: bool = False) -> str:
    """What went wrong on the wire, in words for the client: never aiohttp's own text.

    aiohttp's messages are its internals (``TransferEncodingError: 400, message='Not enough data
    to satisfy transfer length header.'``, where 400 is a parser code, not an HTTP status) and
    would mislead a reader; each case gets a plain sentence instead. Connection failures name
    only host, port and the OS's reason, never a key. ``mid_answer``: the response had started.
    """
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection to {exc.host}:{exc.port} failed: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientPayloadError):
        # A body cut short: chunked encoding ended without its last chunk, or fewer bytes than
        # Content-Length said. The provider (or something between) closed the connection.
        return "the provider closed the stream mid-answer"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the provider closed the connection " + ("mid-answer" if mid_answer else "before answering")
    if unwritten(exc):
        return "the provider closed the connection before the request was sent"
    if isinstance(exc, ConnectionResetError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNRESET):
        return "the connection to the provider was reset" + (" mid-answer" if mid_answer else "")
    if isinstance(exc, aiohttp.ClientResponseError):
        return "the provider sent a malformed HTTP response"
    if isinstance(exc, OSError) and exc.strerror:
        return f"network error: {exc.strerror}"
    return "the stream from the provider broke mid-answer" if mid_answer else "the connection to the provider failed"


__all__ = [
    "AttemptTimeouts",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamResponse",
    "describe_transport_error",
    "forwardable_headers",
    "forwardable_of",
]


def _sendable(body: bytes | None) -> bytes | io.BytesIO | None:
    """aiohttp warns on a bytes body above 1 MiB (its copy would block the loop); a long agent session's
    history is that large: handed over as a file-like object (a new one per send), it is sent in pieces."""
    return io.BytesIO(body) if body is not None and len(body) > LARGE_BODY_BYTES else body
