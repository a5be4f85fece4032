"""A Redis client per topology: a standalone server (or unix socket), a Redis Cluster, or a Sentinel-managed
master, each with the role's pool size, timeout, retries and client name, and the config's TLS.

``open_redis`` is the one place redis-py's clients are built; ``gateway.redis_client.RedisConnections``
calls it once per role. A new mode or connection option goes here and reaches every part at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import StatsConfig, split_address
from gateway.redis_failures import describe_error
from gateway.redis_secrets import RedisSecrets

RedisClient: TypeAlias = "Redis | RedisCluster"
"""What every part holds: the same command API whichever the mode (a Sentinel master is a ``Redis``)."""


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
    that met a dead node, with no retries left, leaves it aiming at that node for good.) A Sentinel
    client asks the sentinels for the master again: its open connections would keep writing to a
    master a failover has demoted in the sentinels' view but not yet in its own.

    It closes the client's connections: only for a client that no other task is using at the time
    (the stats store's background client), never for the request-path one."""
    if isinstance(client, RedisCluster):
        await client.aclose()
    elif isinstance(client.connection_pool, SentinelConnectionPool):
        await client.connection_pool.disconnect()
