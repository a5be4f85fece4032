"""Pooled HTTP clients for the upstream providers, and the one place aiohttp is known.

Why aiohttp: measured on a 2-core machine, a passthrough built on httpx fell from ~570 to ~150
streamed requests/s between concurrency 1 and 64 and added seconds to first-token time at 256
paced streams (its connection pool serialises under load); the same passthrough on aiohttp
held the direct rate at ~0.3 ms CPU per request. Everything outside this module sees only
``UpstreamClient``/``UpstreamResponse`` and the gateway's own error classes: aiohttp's
exceptions are translated here, at the boundary, to the most specific ``UpstreamError``.

The upstream request carries the provider's key, never the client's; client headers that are
hop-by-hop or carry credentials are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

import aiohttp

from gateway import __version__
from gateway.config import GatewayConfig, ProviderConfig
from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

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


def forwardable_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The client's headers that may go upstream (end-to-end, non-credential ones)."""
    decoded = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in headers]
    # Headers a client names in Connection are hop-by-hop for this connection only (RFC 9110 §7.6.1).
    listed = {token.strip().lower() for name, value in decoded if name == "connection" for token in value.split(",")}
    return [
        (name, value)
        for name, value in decoded
        if name not in _DROPPED_HEADERS and name not in listed and not name.startswith(("x-gateway-", "x-forwarded-"))
    ]


@dataclass(frozen=True, slots=True)
class AttemptTimeouts:
    """Timeouts of one upstream attempt: ``read_s`` bounds each gap between chunks, ``total_s`` the whole."""

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
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"{self.provider}: no data from upstream within the idle timeout",
                provider=self.provider,
                status=self.status,
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(
                f"{self.provider}: upstream stream broke ({_describe(exc)})", provider=self.provider, status=self.status
            ) from exc

    async def read_all(self, limit: int | None = None) -> bytes:
        """The whole body (or its first ``limit`` bytes, for error bodies)."""
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = await self.read_chunk()
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


class UpstreamClient:
    """One provider's pooled client. Create inside the running event loop; close with ``aclose``."""

    def __init__(self, provider: ProviderConfig, api_key: str | None) -> None:
        self.provider = provider
        connector = aiohttp.TCPConnector(
            # The router keeps in-flight requests under max_concurrency; the slack covers
            # hedged and cancelled attempts whose connections are still closing.
            limit=provider.max_concurrency + 16,
            limit_per_host=0,
            keepalive_timeout=provider.keepalive_s,
            ttl_dns_cache=300,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        base: dict[str, str] = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "user-agent": f"gateway/{__version__}",
        }
        base.update(dict(provider.headers))
        if api_key:
            base["authorization"] = f"Bearer {api_key}"
        self._base_headers = base
        self._secret = api_key.encode() if api_key else None

    def redact(self, data: bytes) -> bytes:
        """Upstream bytes with this provider's key masked (some providers echo a bad key back)."""
        if self._secret and self._secret in data:
            return data.replace(self._secret, b"***")
        return data

    async def send(
        self, path: str, body: bytes, timeouts: AttemptTimeouts, headers: Iterable[tuple[str, str]] = ()
    ) -> UpstreamResponse:
        """POST ``body`` to ``base_url + path``; returns once the response headers are in."""
        merged = dict(headers)
        merged.update(self._base_headers)
        timeout = aiohttp.ClientTimeout(
            total=timeouts.total_s, sock_connect=timeouts.connect_s, sock_read=timeouts.read_s
        )
        name = self.provider.name
        try:
            response = await self._session.post(
                self.provider.base_url + path, data=body, headers=merged, timeout=timeout, allow_redirects=False
            )
        except TimeoutError as exc:
            raise UpstreamTimeout(f"{name}: upstream did not answer in time ({_describe(exc)})", provider=name) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"{name}: cannot reach upstream ({_describe(exc)})", provider=name) from exc
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
            raise UpstreamUnavailable(f"{self.provider.name}: {_describe(exc)}", provider=self.provider.name) from exc

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


def _describe(exc: BaseException) -> str:
    """A short, key-free description of a transport error (aiohttp messages name only host and port)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection to {exc.host}:{exc.port} failed: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return text[:200]


__all__ = [
    "AttemptTimeouts",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamResponse",
    "forwardable_headers",
]
