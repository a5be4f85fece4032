"""Where a provider's requests go on the wire: its kept-alive connections (``gateway.http1``) to one origin, and
a request's bytes."""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

from gateway.http1 import ConnectFailed, Connection, WireTimeout


class Origin:
    """The kept-alive connections to one scheme, host and port, and how to open another.

    Idle connections are reused last-in first-out (the warmest first); one idle longer than ``keepalive_s`` is
    closed rather than reused, as the provider has likely closed it already."""

    def __init__(self, base_url: str, keepalive_s: float) -> None:
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.https else 80)
        default_port = parts.port is None or parts.port == (443 if self.https else 80)
        named = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address keeps its brackets
        self.host_header = named if default_port else f"{named}:{self.port}"
        self.key = f"{parts.scheme}://{self.host}:{self.port}"
        """What the connections to it share: two base URLs with the same key share one pool."""
        self.keepalive_s = keepalive_s
        self._idle: list[Connection] = []
        self._tls: ssl.SSLContext | None = None

    async def acquire(self, connect_s: float) -> Connection:
        """A connection ready for a request: an idle one still open, else a new one within ``connect_s``."""
        loop = asyncio.get_running_loop()
        idle = self._idle
        if idle:
            now = loop.time()
            while idle:
                connection = idle.pop()
                if connection.reusable and now - connection.idle_since < self.keepalive_s:
                    return connection
                connection.close()
        return await self._connect(loop, connect_s)

    def release(self, connection: Connection) -> None:
        """Take back a connection whose exchange finished cleanly.

        The idle list's oldest end is where a burst's connections wait once traffic falls back (the newest is reused
        first): those idle past ``keepalive_s`` are closed here, so a pool shrinks back after a burst while
        requests still flow, instead of holding the burst's sockets until the provider drops them."""
        now = connection.idle_since = asyncio.get_running_loop().time()
        idle = self._idle
        while idle and now - idle[0].idle_since >= self.keepalive_s:
            idle.pop(0).close()
        idle.append(connection)

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    async def _connect(self, loop: asyncio.AbstractEventLoop, connect_s: float) -> Connection:
        tls = self._tls_context() if self.https else None
        try:
            async with asyncio.timeout(connect_s):
                _, connection = await loop.create_connection(
                    lambda: Connection(loop), self.host, self.port, ssl=tls, server_hostname=self.host if tls else None
                )
        except TimeoutError:
            raise WireTimeout(before_answer=True) from None
        except OSError as exc:
            raise ConnectFailed(
                f"connection to {self.host}:{self.port} failed: {_reason(exc)}", before_answer=True
            ) from None
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()  # loading the system's CAs takes ~0.1 s: once per origin
        return self._tls


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """One request's head and body, ready to write. Header values that would end their line are refused: a
    value carrying CR or LF would smuggle a header (or a second request) in."""
    lines = [f"{method} {target} HTTP/1.1\r\n", f"host: {host}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    if body is not None:
        lines.append(f"content-length: {len(body)}\r\n")
    lines.append("\r\n")
    text = "".join(lines)
    if text.count("\n") != len(lines) or text.count("\r") != len(lines):
        raise ValueError("a header name or value holds a line break")
    try:
        head = text.encode("latin-1")
    except UnicodeEncodeError:
        head = text.encode()
    return head + body if body else head


def _reason(exc: OSError) -> str:
    """A failed connection's cause in words: the OS's reason, or what TLS refused (never OpenSSL's raw text)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the provider's TLS certificate was refused ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return f"the TLS handshake failed ({(exc.reason or 'no reason given').lower().replace('_', ' ')})"
    return exc.strerror or (str(exc.args[-1]) if exc.args else "no reason given")
