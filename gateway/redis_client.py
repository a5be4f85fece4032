"""The one way the gateway reaches Redis: a standalone server, a Redis Cluster, or a Sentinel-managed master.

Every part that keeps state in Redis gets its client here, built from ``[stats]`` (``redis_mode``,
``redis_url``, ``redis_sentinels``, TLS, credentials named by environment variable, pool sizes,
timeouts, retries) so that a new mode or option reaches all of them at once. The lifespan opens one
``RedisConnections`` per process and hands it to each part; each part asks for the client of its role:

    redis = RedisConnections(config.stats, environ)   # cheap: secrets resolved, nothing opened
    stats = open_stats_store(config.stats, redis=redis)
    limiter = open_rate_limiter(config.stats, redis)
    client = redis.requests()                         # e.g. session or response-id bindings
    ...
    await redis.aclose()                              # after every part has stopped using it

Two roles, two pools, because their callers differ:

- ``background()``: the stats store's flushes and refreshes. Bounded by ``redis_timeout_s``, pool of
  ``redis_max_connections``. Its pipelines can be large, and a cluster client that meets a failover
  drops all its connections and re-reads the topology: neither must stall a request.
- ``requests()``: everything a client request waits on (rate limits today; session and response-id
  bindings belong here too). Bounded by ``redis_request_timeout_s``, pool of
  ``redis_request_max_connections``, shared by all request-path parts. Run each call through a
  ``RequestCalls`` (it bounds the wait without cancelling redis-py mid-reply), and fail open (serve
  from local state) on ``REDIS_ERRORS`` or ``TimeoutError``, with a ``Backoff`` so that a dead Redis
  costs nothing.

Cluster-correct by construction. A new key family must keep every multi-key operation (a script's
``KEYS``, ``MULTI``/``EXEC``, ``MGET``…) inside one hash slot, by giving the keys used together one
``{hash tag}``; pipelines may mix slots (the cluster client splits them per node). Writes that must
not count twice are made one script per slot, so that each either happened or did not
(``gateway.stats.redis_writes``). ``tests/test_redis_keys.py`` enumerates every key family written
to a real cluster and fails on one it does not know: add the new family there.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import ConfigError, StatsConfig, split_address
from gateway.types import Clock

_T = TypeVar("_T")

RedisClient: TypeAlias = "Redis | RedisCluster"
"""What every part holds: the same command API whichever the mode (a Sentinel master is a ``Redis``)."""

REDIS_ERRORS: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError)
"""Everything a Redis call may raise when Redis (or the network) fails. ``RedisClusterException``
is not a ``RedisError``: a cluster client raises it when no node answers the topology query."""


@dataclass(frozen=True, slots=True)
class RedisSecrets:
    """Credentials from the environment; never logged (``repr`` shows none of them)."""

    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)


def resolve_redis_secrets(config: StatsConfig, environ: Mapping[str, str], source: str = "config") -> RedisSecrets:
    """Each credential the config names, from ``environ``; a named but unset variable is a ``ConfigError``.

    Also checks that the TLS files exist, so that a typo stops start-up rather than every connection.
    """
    missing: list[str] = []
    values: dict[str, str | None] = {}
    for key, what in (
        ("redis_username_env", "the Redis user name"),
        ("redis_password_env", "the Redis password"),
        ("redis_sentinel_username_env", "the sentinels' user name"),
        ("redis_sentinel_password_env", "the sentinels' password"),
    ):
        name: str | None = getattr(config, key)
        value = environ.get(name, "") if name else ""
        if name and not value:
            missing.append(f"stats.{key}: environment variable {name} is not set (expected {what})")
        values[key] = value or None
    for key in ("redis_tls_ca_file", "redis_tls_cert_file", "redis_tls_key_file"):
        path: str | None = getattr(config, key)
        if path is not None and not Path(path).is_file():
            missing.append(f'stats.{key}: no such file "{path}"')
    if missing:
        raise ConfigError(f"{source}: " + "; ".join(missing))
    return RedisSecrets(
        username=values["redis_username_env"],
        password=values["redis_password_env"],
        sentinel_username=values["redis_sentinel_username_env"],
        sentinel_password=values["redis_sentinel_password_env"],
    )


@dataclass(frozen=True, slots=True)
class RedisRole:
    """Who a client is for: its name in ``CLIENT LIST``, its pool size, its timeout and its retries."""

    name: str
    max_connections: int
    timeout_s: float
    retries: int

    @classmethod
    def background(cls, config: StatsConfig) -> RedisRole:
        # Never a blind retry: a pipeline re-sent after a lost reply would count its samples twice.
        # The stats store retries what was not written itself, after a back-off, one slot at a time.
        return cls("gateway-stats", config.redis_max_connections, config.redis_timeout_s, 0)

    @classmethod
    def requests(cls, config: StatsConfig) -> RedisRole:
        return cls(
            "gateway-requests",
            config.redis_request_max_connections,
            config.redis_request_timeout_s,
            config.redis_retries,
        )


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel pool that waits (up to its timeout) for a free connection rather than failing at once."""


class _Sentinel(Sentinel):
    """redis-py's Sentinel, with a master discovery that several connections may run at once.

    redis-py's moves the sentinel that answered to the front by swapping it with the first, at an
    index read before its ``await``: two connections discovering together (a burst of requests
    after a failover) could drop a sentinel client from the list, never to be tried or closed
    again, and list another twice. This one moves it by identity, with no ``await`` in between.
    """

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        errors: list[str] = []
        for sentinel in list(self.sentinels):
            try:
                masters: Any = await sentinel.sentinel_masters()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                errors.append(f"{describe_error(exc)}")
                continue
            state = masters.get(service_name)
            if state and self.check_master_state(state, service_name):
                if sentinel in self.sentinels:
                    self.sentinels.remove(sentinel)
                    self.sentinels.insert(0, sentinel)
                ip = self._force_master_ip if self._force_master_ip is not None else state["ip"]
                return ip, state["port"]
        detail = f" ({'; '.join(errors)})" if errors else ""
        raise MasterNotFoundError(f"No master found for {service_name!r}{detail}")


class _SentinelRedis(Redis):
    """The master client of a Sentinel: closing it also closes the connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        pool = self.connection_pool
        await super().aclose(close_connection_pool)
        if isinstance(pool, SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


def _tls_options(config: StatsConfig) -> dict[str, Any]:
    return {
        "ssl_ca_certs": config.redis_tls_ca_file,
        "ssl_certfile": config.redis_tls_cert_file,
        "ssl_keyfile": config.redis_tls_key_file,
        "ssl_cert_reqs": "none" if config.redis_tls_verify == "none" else "required",
        "ssl_check_hostname": config.redis_tls_verify == "full",
    }


def open_redis(config: StatsConfig, secrets: RedisSecrets, role: RedisRole) -> RedisClient:
    """A new client for ``role``, owning its connections (close it with ``aclose()``). Connects lazily."""
    common: dict[str, Any] = {
        "socket_timeout": role.timeout_s,
        "socket_connect_timeout": role.timeout_s,
        "decode_responses": True,
        "client_name": role.name,
        "username": secrets.username,
        "password": secrets.password,
    }
    tls = _tls_options(config) if config.redis_tls else {}
    if config.redis_mode == "cluster":
        parts = urlsplit(config.redis_url)
        seeds = [(parts.hostname or "localhost", parts.port or 6379)]
        seeds += [split_address(address) for address in config.redis_cluster_nodes]
        # A URL's own credentials (tests, `gateway stats --redis`) win, as they do in from_url.
        if parts.password:
            common.update(username=parts.username or None, password=parts.password)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in seeds],
            max_connections=role.max_connections,
            # The slots of a failed master are not covered until its replica takes over: the client
            # must still start, and serve the other slots, meanwhile.
            require_full_coverage=False,
            retry=Retry(NoBackoff(), role.retries),
            ssl=config.redis_tls,
            **common,
            **tls,
        )
    retry = Retry(NoBackoff(), role.retries)
    if config.redis_mode == "sentinel":
        sentinel_options: dict[str, Any] = {
            "socket_timeout": role.timeout_s,
            "socket_connect_timeout": role.timeout_s,
            # redis-py's default retries a failed connection 3 times with pauses of 1, 2, 4 s: a
            # sentinel that is down (often on the failed host) would hold up every discovery.
            "retry": Retry(NoBackoff(), 0),
            "username": secrets.sentinel_username,
            "password": secrets.sentinel_password,
            "client_name": role.name,
            "ssl": config.redis_tls,
            **tls,
        }
        addresses = [split_address(a) for a in config.redis_sentinels]
        sentinel = _Sentinel(addresses, sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2 on
        assert config.redis_sentinel_service is not None  # the config checks it in sentinel mode
        client: Redis = sentinel.master_for(
            config.redis_sentinel_service,
            redis_class=_SentinelRedis,
            connection_pool_class=_BlockingSentinelPool,
            max_connections=role.max_connections,
            timeout=role.timeout_s,
            db=config.redis_db,
            retry=retry,
            ssl=config.redis_tls,
            **common,
            **tls,
        )
        return client
    if urlsplit(config.redis_url).scheme == "unix":
        tls = {}
    pool = BlockingConnectionPool.from_url(
        config.redis_url, max_connections=role.max_connections, timeout=role.timeout_s, retry=retry, **common, **tls
    )
    return Redis.from_pool(pool)


async def after_failure(client: RedisClient) -> None:
    """Call after a pipeline failed with one of ``REDIS_ERRORS``: a cluster client then re-reads the
    topology before its next call. (It does so by itself after a failed single command, but a pipeline
    that met a dead node, with no retries left, leaves it aiming at that node for good.)

    It closes the client's connections: only for a client that no other task is using at the time
    (the stats store's background client), never for the request-path one."""
    if isinstance(client, RedisCluster):
        await client.aclose()


def describe_error(exc: BaseException) -> str:
    """A Redis failure in one short line, for logs and health reasons. redis-py's messages name hosts
    and ports, never a password; a Sentinel's lists every sentinel client's repr, cut off here."""
    text = str(exc).split(" : <redis.", 1)[0] or type(exc).__name__
    if isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    return text if len(text) <= 200 else text[:199] + "…"


class RedisConnections:
    """The Redis clients of one process, one per role, each opened on first use; ``aclose`` closes all.

    Cheap to build (it resolves the credentials and raises ``ConfigError`` if one is missing); no
    connection is made before a client is first used. One event loop only.
    """

    def __init__(self, config: StatsConfig, environ: Mapping[str, str], source: str = "config") -> None:
        self.config = config
        self.secrets = resolve_redis_secrets(config, environ, source) if config.backend == "redis" else RedisSecrets()
        self._clients: dict[str, RedisClient] = {}

    def _client(self, role: RedisRole) -> RedisClient:
        client = self._clients.get(role.name)
        if client is None:
            client = self._clients[role.name] = open_redis(self.config, self.secrets, role)
        return client

    def background(self) -> RedisClient:
        """The stats store's client (see the module docstring)."""
        return self._client(RedisRole.background(self.config))

    def requests(self) -> RedisClient:
        """The client shared by everything a request waits on (see the module docstring)."""
        return self._client(RedisRole.requests(self.config))

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


class RequestCalls:
    """Runs the Redis calls a request waits on: at most the pool's size at once, each waited for at
    most ``redis_request_timeout_s``. Usage::

        calls = RequestCalls(config)
        try:
            value = await calls.run(lambda: client.get(key))
        except (*REDIS_ERRORS, TimeoutError):
            ...  # go on without Redis (and back off)
        await calls.aclose()  # at shutdown, before the client is closed

    A call past its time is not cancelled: cancelling redis-py mid-reply can leave a connection
    unusable, or drop it unclosed. The request stops waiting and the call finishes in the
    background, bounded by the socket timeouts; one still queued for a connection when its request
    gave up is not sent at all. The queue itself is needed because a cluster client's per-node pool
    fails at once when exhausted, rather than waiting.
    """

    def __init__(self, config: StatsConfig) -> None:
        self.timeout_s = config.redis_request_timeout_s
        self._slots = asyncio.Semaphore(config.redis_request_max_connections)
        self._running: set[asyncio.Future[Any]] = set()

    async def run(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """``call()``'s result; raises what it raised, or ``TimeoutError`` past the timeout."""
        waiting = [True]

        async def bounded() -> _T | None:
            async with self._slots:
                if not waiting[0]:
                    return None  # its request went on without it: nothing to send any more
                return await call()

        task = asyncio.ensure_future(bounded())
        self._running.add(task)
        task.add_done_callback(self._finished)
        try:
            done, _ = await asyncio.wait((task,), timeout=self.timeout_s)
        finally:
            waiting[0] = False
        if not done:
            raise TimeoutError
        result = task.result()
        return result  # type: ignore[return-value]  # None only once nobody waits

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a call that failed after its request left is not an error

    async def aclose(self) -> None:
        """Wait for the calls still running (bounded by the socket timeouts)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


class Backoff:
    """Jittered, doubling pauses after consecutive failures: ``min_s``, 2 × ``min_s``, … up to ``max_s``,
    each scaled by a random factor in [0.8, 1.2] so that replicas that failed together retry apart.

    Usage::

        if backoff.ready():
            try: ...; backoff.succeeded()
            except REDIS_ERRORS: backoff.failed()
    """

    def __init__(
        self, min_s: float, max_s: float, clock: Clock = time.monotonic, rng: random.Random | None = None
    ) -> None:
        self.min_s = min_s
        self.max_s = max_s
        self.clock = clock
        self.rng = rng or random.Random()
        self.failures = 0
        self.retry_at = 0.0

    @classmethod
    def from_config(cls, config: StatsConfig, clock: Clock = time.monotonic) -> Backoff:
        return cls(config.redis_backoff_min_s, config.redis_backoff_max_s, clock)

    def ready(self) -> bool:
        return self.failures == 0 or self.clock() >= self.retry_at

    def failed(self) -> float:
        """Count a failure; returns the pause before the next attempt."""
        self.failures += 1
        delay: float = min(self.max_s, self.min_s * 2 ** min(self.failures - 1, 30)) * self.rng.uniform(0.8, 1.2)
        self.retry_at = self.clock() + delay
        return delay

    def succeeded(self) -> int:
        """Reset; returns how many failures preceded this success."""
        failures, self.failures, self.retry_at = self.failures, 0, 0.0
        return failures


__all__ = [
    "REDIS_ERRORS",
    "Backoff",
    "RedisClient",
    "RedisConnections",
    "RedisRole",
    "RedisSecrets",
    "RequestCalls",
    "after_failure",
    "describe_error",
    "open_redis",
    "resolve_redis_secrets",
]
