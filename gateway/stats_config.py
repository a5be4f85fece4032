"""The ``[stats]`` keys: the stats window and where it is shared, i.e. how to reach Redis.

Part of the config (``gateway.config`` re-exports ``StatsConfig``), in a module of its own because
Redis can be reached three ways (``redis_mode``: one server, a Redis Cluster, a Sentinel-managed
master), each with its own keys, TLS options and credentials named by environment variable; the
keys must agree with the mode, and every disagreement is an error naming its key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from gateway.toml_reader import TableReader

StatsBackend = Literal["memory", "redis"]
STATS_BACKENDS: tuple[StatsBackend, ...] = ("memory", "redis")
RedisMode = Literal["standalone", "cluster", "sentinel"]
REDIS_MODES: tuple[RedisMode, ...] = ("standalone", "cluster", "sentinel")
TlsVerify = Literal["full", "ca", "none"]
TLS_VERIFY: tuple[TlsVerify, ...] = ("full", "ca", "none")


@dataclass(frozen=True, slots=True)
class StatsConfig:
    backend: StatsBackend = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    window_s: int = 300
    """How far back the rolling percentiles look."""
    slice_s: int = 10
    """Width of one histogram time slice; the window is a whole number of slices."""
    key_prefix: str = "gateway"
    """Prefix of every Redis key the stats use; replicas that share stats share a prefix."""
    refresh_interval_s: float = 1.0
    """How often each replica re-reads the shared store into its local snapshot."""
    flush_interval_s: float = 0.2
    """How often buffered samples are written to Redis (sooner when many are waiting)."""
    buffer_limit: int = 100_000
    """Most histogram cells (Redis hash fields) held for Redis while it is unreachable. Samples
    that fit existing cells are always kept; one that needs a new cell past the limit is dropped
    and counted. A cell takes about 60 bytes (measured), so the default bounds the buffer near 6 MB."""
    redis_timeout_s: float = 1.0
    """Connect, read and pool-wait timeout of each background Redis call (the stats store's)."""
    redis_max_connections: int = 4
    """Size of the stats store's connection pool (per node in a cluster; its one task needs one at a time)."""
    redis_mode: RedisMode = "standalone"
    """``standalone``: ``redis_url`` is the server; ``cluster``: ``redis_url`` (and ``redis_cluster_nodes``)
    are seed nodes of a Redis Cluster; ``sentinel``: the master of ``redis_sentinel_service`` as the
    ``redis_sentinels`` report it, followed through failovers."""
    redis_cluster_nodes: tuple[str, ...] = ()
    """Cluster mode: more ``host:port`` seed nodes beside ``redis_url``, tried when it is down at start."""
    redis_sentinels: tuple[str, ...] = ()
    """Sentinel mode: the sentinels' ``host:port`` addresses."""
    redis_sentinel_service: str | None = None
    """Sentinel mode: the name the sentinels monitor the master under (``sentinel monitor <name> ...``)."""
    redis_db: int = 0
    """Sentinel mode: the database number (standalone takes it from the URL; a cluster has only 0)."""
    redis_username_env: str | None = None
    """Names the variable holding the Redis ACL user name (absent: the default user)."""
    redis_password_env: str | None = None
    """Names the variable holding the Redis password (absent: no password). Never in ``redis_url``."""
    redis_sentinel_username_env: str | None = None
    redis_sentinel_password_env: str | None = None
    """Sentinel mode: the sentinels' own credentials, if they require any (``requirepass`` on a sentinel)."""
    redis_tls: bool = False
    """TLS to Redis: true for a ``rediss://`` URL; in sentinel mode, set here (sentinels and master alike)."""
    redis_tls_ca_file: str | None = None
    """PEM bundle of the CAs that sign the servers' certificates (absent: the system's)."""
    redis_tls_cert_file: str | None = None
    redis_tls_key_file: str | None = None
    """A client certificate and its key, for servers that ask for one (``tls-auth-clients yes``)."""
    redis_tls_verify: TlsVerify = "full"
    """``full``: certificate and host name; ``ca``: certificate only (nodes announced by IP); ``none``: neither."""
    redis_request_timeout_s: float = 0.5
    """Longest a client request waits on Redis for a rate limit; past it the request goes on without it. A
    budget's reservation waits twice this (a connection, then the call), past which it is refused."""
    redis_request_max_connections: int = 32
    """Size of the pool shared by everything a request waits on (rate limits), per node in a cluster."""
    redis_retries: int = 1
    """Immediate retries of a request-path Redis call (rate limits) after a connection error or timeout,
    on a fresh connection (a cluster re-reads its topology first). The stats store never retries blindly:
    what it could not write it keeps, and writes again after a back-off."""
    redis_wait_replicas: int = 0
    """Stats writes count as done only once this many of the master's connected replicas (all it has,
    if fewer, unless it has lost one) confirm them (``WAIT``), so that a failover promoting one cannot
    lose them; until then they are sent again (Redis applies each once). A master that lost a replica
    holds them until one is back or a failover names another master. 0: the master's reply suffices,
    and a master that dies before its replica caught up takes the last writes with it."""
    redis_backoff_min_s: float = 0.25
    redis_backoff_max_s: float = 5.0
    """After a failed call, Redis is left alone for a jittered, doubling pause between these bounds."""

    @property
    def redis_target(self) -> str:
        """Where Redis is, without credentials: for logs, health reasons and ``gateway check``."""
        if self.redis_mode == "sentinel":
            return f"sentinel service {self.redis_sentinel_service} via {', '.join(self.redis_sentinels)}"
        parts = urlsplit(self.redis_url)
        if parts.scheme == "unix":
            return f"unix://{parts.path}"
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        where = f"{parts.scheme}://{host}{port}{parts.path}"
        return f"cluster via {where}" if self.redis_mode == "cluster" else where

    tokenizer: str = "o200k_base"
    """A tiktoken encoding name, or a path to a local ``.tiktoken`` file (air-gapped deployments)."""


def parse_stats(table: TableReader) -> StatsConfig:
    """The ``[stats]`` table; raises ``ConfigError`` naming the key."""
    default = StatsConfig()
    stats = StatsConfig(
        backend=table.choice("backend", STATS_BACKENDS, default.backend),
        redis_url=table.text("redis_url", default.redis_url),
        window_s=table.integer("window_s", default.window_s, minimum=1),
        slice_s=table.integer("slice_s", default.slice_s, minimum=1),
        key_prefix=table.text("key_prefix", default.key_prefix),
        refresh_interval_s=table.number("refresh_interval_s", default.refresh_interval_s, positive=True),
        flush_interval_s=table.number("flush_interval_s", default.flush_interval_s, positive=True),
        buffer_limit=table.integer("buffer_limit", default.buffer_limit, minimum=1),
        redis_timeout_s=table.number("redis_timeout_s", default.redis_timeout_s, positive=True),
        redis_max_connections=table.integer("redis_max_connections", default.redis_max_connections, minimum=1),
        tokenizer=table.text("tokenizer", default.tokenizer),
        redis_mode=table.choice("redis_mode", REDIS_MODES, default.redis_mode),
        redis_cluster_nodes=_addresses(table, "redis_cluster_nodes"),
        redis_sentinels=_addresses(table, "redis_sentinels"),
        redis_sentinel_service=table.text("redis_sentinel_service", None),
        redis_db=table.integer("redis_db", default.redis_db, minimum=0),
        redis_username_env=table.text("redis_username_env", None),
        redis_password_env=table.text("redis_password_env", None),
        redis_sentinel_username_env=table.text("redis_sentinel_username_env", None),
        redis_sentinel_password_env=table.text("redis_sentinel_password_env", None),
        redis_tls=table.flag("redis_tls", False),
        redis_tls_ca_file=table.text("redis_tls_ca_file", None),
        redis_tls_cert_file=table.text("redis_tls_cert_file", None),
        redis_tls_key_file=table.text("redis_tls_key_file", None),
        redis_tls_verify=table.choice("redis_tls_verify", TLS_VERIFY, default.redis_tls_verify),
        redis_request_timeout_s=table.number("redis_request_timeout_s", default.redis_request_timeout_s, positive=True),
        redis_request_max_connections=table.integer(
            "redis_request_max_connections", default.redis_request_max_connections, minimum=1
        ),
        redis_retries=table.integer("redis_retries", default.redis_retries, minimum=0),
        redis_wait_replicas=table.integer("redis_wait_replicas", default.redis_wait_replicas, minimum=0),
        redis_backoff_min_s=table.number("redis_backoff_min_s", default.redis_backoff_min_s, positive=True),
        redis_backoff_max_s=table.number("redis_backoff_max_s", default.redis_backoff_max_s, positive=True),
    )
    if stats.window_s % stats.slice_s:
        raise table.error("window_s", f"expected a multiple of slice_s ({stats.slice_s}), got {stats.window_s}")
    if any(c in stats.key_prefix for c in "{}"):
        # The prefix sits inside each key's {hash tag}; a brace would split the tag.
        raise table.error("key_prefix", f'must not contain "{{" or "}}", got "{stats.key_prefix}"')
    if stats.flush_interval_s > stats.slice_s:
        raise table.error(
            "flush_interval_s", f"expected at most slice_s ({stats.slice_s}), got {stats.flush_interval_s:g}"
        )
    stats = _check_redis(table, stats)
    table.finish()
    return stats


def _addresses(table: TableReader, key: str) -> tuple[str, ...]:
    """An array of ``host:port`` strings (``[::1]:26379`` for an IPv6 address)."""
    value = table.strings(key)
    for index, item in enumerate(value):
        try:
            split_address(item)
        except ValueError as exc:
            raise table.error(f"{key}[{index}]", str(exc)) from None
    return value


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) into its parts; ``ValueError`` says what is wrong."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'expected "host:port" with a port 1-65535, got "{address}"')
    return host, int(port)


def _check_redis(table: TableReader, stats: StatsConfig) -> StatsConfig:
    """The Redis keys must agree with the mode; TLS follows the URL's scheme outside sentinel mode."""
    given = set(table.names())
    mode = stats.redis_mode
    parts = urlsplit(stats.redis_url)
    for key, needed in (
        ("redis_sentinels", "sentinel"),
        ("redis_sentinel_service", "sentinel"),
        ("redis_sentinel_username_env", "sentinel"),
        ("redis_sentinel_password_env", "sentinel"),
        ("redis_db", "sentinel"),
        ("redis_cluster_nodes", "cluster"),
    ):
        if key in given and mode != needed:
            raise table.error(key, f'only applies with redis_mode = "{needed}"')
    if mode == "sentinel":
        if "redis_url" in given:
            raise table.error("redis_url", 'not used with redis_mode = "sentinel" (the sentinels name the master)')
        if not stats.redis_sentinels:
            raise table.error("redis_sentinels", 'expected at least one "host:port" with redis_mode = "sentinel"')
        if stats.redis_sentinel_service is None:
            raise table.error("redis_sentinel_service", 'missing (expected the monitored name, e.g. "mymaster")')
    else:
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise table.error("redis_url", "expected a redis://, rediss:// or unix:// URL")
        if parts.username or parts.password:
            # The file is not the place for secrets, and a URL ends up in logs.
            raise table.error("redis_url", "must not contain credentials (name them with redis_password_env)")
        if "redis_tls" in given:
            raise table.error("redis_tls", "follows the URL here: use a rediss:// URL for TLS")
        stats = dataclasses.replace(stats, redis_tls=parts.scheme == "rediss")
    if mode == "cluster":
        if parts.scheme == "unix":
            raise table.error("redis_url", "a cluster is reached over TCP: expected a redis:// or rediss:// seed node")
        if parts.path.strip("/") not in ("", "0"):
            raise table.error("redis_url", f'a cluster has only database 0, got "{parts.path}"')
    if not stats.redis_tls:
        for key in ("redis_tls_ca_file", "redis_tls_cert_file", "redis_tls_key_file", "redis_tls_verify"):
            if key in given:
                where = "redis_tls = true" if mode == "sentinel" else "a rediss:// URL"
                raise table.error(key, f"only applies with TLS ({where})")
    if (stats.redis_tls_cert_file is None) != (stats.redis_tls_key_file is None):
        key = "redis_tls_key_file" if stats.redis_tls_key_file is None else "redis_tls_cert_file"
        raise table.error(key, "a client certificate needs both redis_tls_cert_file and redis_tls_key_file")
    if stats.redis_backoff_max_s < stats.redis_backoff_min_s:
        raise table.error(
            "redis_backoff_max_s", f"expected at least redis_backoff_min_s ({stats.redis_backoff_min_s:g})"
        )
    if stats.redis_retries > 10:
        raise table.error("redis_retries", f"expected at most 10, got {stats.redis_retries}")
    return stats


def resolve_stats_files(stats: StatsConfig, directory: Path) -> StatsConfig:
    """The TLS files with relative paths read from ``directory`` (the config file's)."""

    def beside(file: str | None) -> str | None:
        return file if file is None or Path(file).is_absolute() else str(directory / file)

    return dataclasses.replace(
        stats,
        redis_tls_ca_file=beside(stats.redis_tls_ca_file),
        redis_tls_cert_file=beside(stats.redis_tls_cert_file),
        redis_tls_key_file=beside(stats.redis_tls_key_file),
    )


__all__ = ["REDIS_MODES", "STATS_BACKENDS", "RedisMode", "StatsBackend", "StatsConfig", "parse_stats", "split_address"]
