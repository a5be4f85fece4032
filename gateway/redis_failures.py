"""What a Redis failure is, how it is told in one line, and how a caller backs off after one.

Every part that calls Redis fails open on ``REDIS_ERRORS`` (serving from local state) and waits a
``Backoff`` before trying again, so that a dead Redis costs nothing on the request path.
"""

from __future__ import annotations

import functools
import random
import time
from typing import TYPE_CHECKING

from gateway.config import StatsConfig
from gateway.types import Clock

if TYPE_CHECKING:
    REDIS_ERRORS: tuple[type[BaseException], ...]


@functools.cache
def redis_errors() -> tuple[type[BaseException], ...]:
    """Everything a Redis call may raise when Redis (or the network) fails: ``REDIS_ERRORS``.
    ``RedisClusterException`` is not a ``RedisError``: a cluster client raises it when no node answers
    the topology query.

    A function, and ``REDIS_ERRORS`` read through the module's ``__getattr__``, so that redis-py (~8 MiB
    resident, 0.1 s to import: its ``__init__`` loads all of it) is imported only by a gateway that uses
    Redis; an ``except redis_errors():`` clause calls it only once an exception reaches it.
    """
    from redis.exceptions import RedisClusterException, RedisError

    return (RedisError, RedisClusterException, OSError)


def __getattr__(name: str) -> object:
    if name == "REDIS_ERRORS":
        return redis_errors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def refuses_writes(exc: BaseException) -> bool:
    """Whether Redis answered but refuses every write now, rather than one call failing on its own: out of
    memory under ``noeviction``, a replica (``READONLY``, after a failover), a failed snapshot (``MISCONF``),
    an ACL user without the command (``NOPERM``), a cluster without its slots (``CLUSTERDOWN``)."""
    from redis.exceptions import ClusterDownError, NoPermissionError, OutOfMemoryError, ReadOnlyError

    refusals = (OutOfMemoryError, ReadOnlyError, NoPermissionError, ClusterDownError)
    return isinstance(exc, refusals) or str(exc).startswith(("MISCONF", "NOREPLICAS"))


def describe_error(exc: BaseException) -> str:
    """A Redis failure in one short line, for logs and health reasons. redis-py's messages name hosts
    and ports, never a password; a Sentinel's lists every sentinel client's repr, cut off here."""
    text = str(exc).split(" : <redis.", 1)[0] or type(exc).__name__
    if isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    return text if len(text) <= 200 else text[:199] + "…"


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
