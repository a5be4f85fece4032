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
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.config import StatsConfig

# How a client is opened per topology, the credentials, and the failure vocabulary each live in
# their own module; every name callers have imported from here still is. Those that need redis-py
# (the topology's, ``REDIS_ERRORS``) are read on first use (``__getattr__``): a gateway whose stats are
# in memory never imports it (~8 MiB resident). Import ``RedisClient`` under ``TYPE_CHECKING`` only.
from gateway.redis_failures import Backoff, describe_error, redis_errors
from gateway.redis_secrets import RedisSecrets, resolve_redis_secrets

if TYPE_CHECKING:
    from gateway.redis_failures import REDIS_ERRORS
    from gateway.redis_topology import RedisClient, RedisRole, after_failure, open_redis

_T = TypeVar("_T")
_FROM_TOPOLOGY = frozenset({"RedisClient", "RedisRole", "after_failure", "open_redis"})


def __getattr__(name: str) -> object:
    if name == "REDIS_ERRORS":
        return redis_errors()
    if name in _FROM_TOPOLOGY:
        from gateway import redis_topology

        return getattr(redis_topology, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        from gateway.redis_topology import open_redis

        client = self._clients.get(role.name)
        if client is None:
            client = self._clients[role.name] = open_redis(self.config, self.secrets, role)
        return client

    def background(self) -> RedisClient:
        """The stats store's client (see the module docstring)."""
        from gateway.redis_topology import RedisRole

        return self._client(RedisRole.background(self.config))

    def requests(self) -> RedisClient:
        """The client shared by everything a request waits on (see the module docstring)."""
        from gateway.redis_topology import RedisRole

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
    "redis_errors",
    "resolve_redis_secrets",
]
