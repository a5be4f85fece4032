"""The ``[server]`` and ``[metrics]`` tables: how the gateway listens, serves and exports.

Each section parses its own table with ``toml_reader.TableReader``, validates it in full and
rejects unknown keys; ``gateway.config`` assembles the sections into ``GatewayConfig``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from gateway.toml_reader import MISSING, TableReader, describe_value

Workers = int | Literal["auto"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 32_000_000
    """Request bodies above this are refused with 413 before they are read in full. The default is
    Anthropic's own limit (32 MB): a long agent session re-sends its whole history every turn."""
    access_log: bool = True
    """One JSON line per request on the ``gateway.access`` logger (no prompt or answer text)."""
    log_bodies: bool = False
    """Debug only: add the request body and the answer text to each access-log line."""
    shutdown_grace_s: float = 30.0
    """On SIGTERM, how long requests in flight (streams included) may run before they are cut."""
    header_timeout_s: float = 10.0
    """A client's request head must be complete this long after its first byte (or its connection opened); else
    the socket closes. ``0``: no deadline."""
    body_timeout_s: float = 30.0
    """A request's whole body must have arrived this long after its head, else 408 in the client API's shape."""
    max_connections: int = 10_000
    """Open client connections per worker process; past it a new one is answered 503 and closed."""
    keepalive_timeout_s: float = 75.0
    """How long an idle kept-alive client connection stays open. Longer than the clients' own pool expiry
    (httpx, and so the OpenAI SDK: 5 s; load balancers: 60 s), so that the server is never the side that closes a
    connection a client is just reusing: when both sides expire it at the same moment (uvicorn's default, 5 s), a
    request sent into a connection the server is closing fails with no response."""
    workers: Workers = 1
    """Worker processes serving the port, each a full replica (``gateway.workers``); ``"auto"``: one
    per core available to the process. ``gateway serve --workers N`` overrides it."""
    metrics_key_env: str | None = None
    """The environment variable holding the key ``GET /metrics`` needs (``Authorization: Bearer``); None: /metrics
    is open, and its spend and budget series carry no key or team names."""
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    """Addresses (or networks) whose ``X-Forwarded-For`` is believed as the client's address; () believes none."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    otel_genai: bool = False
    """Also export OpenTelemetry's GenAI client metrics (``gen_ai_client_*``) beside the ``gateway_`` ones."""


def parse_server(table: TableReader) -> ServerConfig:
    default = ServerConfig()
    server = ServerConfig(
        host=table.text("host", default.host),
        port=table.integer("port", default.port, minimum=0),
        max_body_bytes=table.integer("max_body_bytes", default.max_body_bytes, minimum=1),
        access_log=table.flag("access_log", default.access_log),
        log_bodies=table.flag("log_bodies", default.log_bodies),
        shutdown_grace_s=table.number("shutdown_grace_s", default.shutdown_grace_s, minimum=0.0),
        header_timeout_s=table.number("header_timeout_s", default.header_timeout_s, minimum=0.0),
        body_timeout_s=table.number("body_timeout_s", default.body_timeout_s, minimum=0.0),
        max_connections=table.integer("max_connections", default.max_connections, minimum=0),
        keepalive_timeout_s=table.number("keepalive_timeout_s", default.keepalive_timeout_s, positive=True),
        workers=parse_workers(table),
        metrics_key_env=table.text("metrics_key_env", None),
        trusted_proxies=table.strings("trusted_proxies", default.trusted_proxies),
    )
    for address in server.trusted_proxies:
        if address != "*" and not _is_network(address):
            raise table.error("trusted_proxies", f'expected IP addresses or networks (or "*"), got "{address}"')
    if server.port > 65535:
        raise table.error("port", f"expected a port number 0-65535, got {server.port}")
    if server.log_bodies and not server.access_log:
        raise table.error("log_bodies", "needs access_log = true (bodies are written to the access log)")
    table.finish()
    return server


def _is_network(address: str) -> bool:
    try:
        ipaddress.ip_network(address, strict=False)
    except ValueError:
        return False
    return True


def parse_workers(table: TableReader) -> Workers:
    value = table.raw("workers")
    if value is MISSING:
        return 1
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value  # checked just above: "auto" or a count
    raise table.error("workers", f'expected a number of workers >= 1 or "auto", got {describe_value(value)}')


def parse_metrics(table: TableReader) -> MetricsConfig:
    metrics = MetricsConfig(otel_genai=table.flag("otel_genai", MetricsConfig().otel_genai))
    table.finish()
    return metrics
