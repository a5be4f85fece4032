"""Bindings: a key (a response id, a session) → the deployment that holds its state, with a TTL.

Why: some requests must reach one deployment. A Responses call that names ``previous_response_id``
(and ``GET``/``DELETE /v1/responses/{id}``) only works where that response was created; a session
is best served where its prompt is cached. Every replica must find the binding another made, so it
is shared through Redis when the stats are; without Redis it lives in this process.

The request path never waits long for it:

- ``get`` reads the local cache only (no I/O): every binding this replica made or looked up.
- ``lookup`` (async) asks Redis only on a local miss, bounded by ``lookup_timeout_s`` (a few ms);
  a slow or unreachable Redis answers ``UNAVAILABLE`` and the caller decides (serve unbound, or
  say it cannot tell).
- ``put`` and ``delete`` change the local cache at once and are written to Redis by a background
  task (``SET key value EX ttl``, pipelined), never while a request waits. Writes that Redis
  refused or could not take are kept (bounded) and retried; the store reports itself degraded
  meanwhile (``/readyz``, metrics) and nothing else is lost.

Keys are namespaced (``response``, ``session``) and laid out like the stats
(``gateway.stats.redis_layout``): ``{<prefix>:bind:<namespace>:<key>}``, percent-encoded, one
hash-tagged key per binding, so that a Redis Cluster can hold them. Values are short strings the
caller encodes (e.g. ``model`` and ``deployment``). Usage::

    store.put("response", "resp_123", "m\\x1fgroq", ttl_s=30 * 86400)
    store.get("response", "resp_123")              # local: no I/O
    await store.lookup("response", "resp_123")     # local, else Redis within the deadline
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol
from urllib.parse import quote

from gateway.types import Clock

if TYPE_CHECKING:
    from gateway.redis_client import RedisClient

logger = logging.getLogger("gateway.bindings")


class Unavailable:
    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE: Final = Unavailable()
"""What ``lookup`` answers when the shared store could not be asked in time: the binding may exist."""

LOOKUP_TIMEOUT_S = 0.01
"""How long a request may wait for Redis on a local miss (a loopback GET takes well under 1 ms)."""
LOCAL_LIMIT = 100_000
"""Bindings kept in the local cache; the least recently used go first (Redis keeps them all)."""
PENDING_LIMIT = 50_000
"""Writes held for Redis while it is unreachable; past this, the oldest are dropped and counted."""
FLUSH_INTERVAL_S = 0.05
BACKOFF_MAX_S = 5.0


@functools.cache
def binding_errors() -> tuple[type[BaseException], ...]:
    """What a binding store's Redis call raises when Redis fails (``REDIS_ERRORS``): read at the ``except``,
    so that redis-py is imported only by a gateway that uses Redis (``gateway.redis_failures``)."""
    from redis.exceptions import RedisError

    return (RedisError, OSError)


def __getattr__(name: str) -> object:
    if name == "REDIS_ERRORS":
        return binding_errors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


BackendName = Literal["memory", "redis"]


@dataclass(frozen=True, slots=True)
class BindingHealth:
    degraded: bool = False
    reason: str | None = None
    dropped_writes: int = 0


class BindingStore(Protocol):
    """See the module docstring. Used on the event loop only."""

    backend: BackendName

    def get(self, namespace: str, key: str) -> str | None: ...

    async def lookup(self, namespace: str, key: str) -> str | None | Unavailable: ...

    def put(self, namespace: str, key: str, value: str, ttl_s: float) -> None: ...

    def delete(self, namespace: str, key: str) -> None: ...

    def health(self) -> BindingHealth: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


class InMemoryBindingStore:
    """Bindings in this process: bounded (least recently used out first), each with its own expiry."""

    backend: BackendName = "memory"

    def __init__(self, clock: Clock = time.monotonic, limit: int = LOCAL_LIMIT) -> None:
        self.clock = clock
        self.limit = limit
        self._entries: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    def get(self, namespace: str, key: str) -> str | None:
        entry = self._entries.get((namespace, key))
        if entry is None:
            return None
        value, expires = entry
        if expires <= self.clock():
            del self._entries[(namespace, key)]
            return None
        self._entries.move_to_end((namespace, key))
        return value

    async def lookup(self, namespace: str, key: str) -> str | None | Unavailable:
        return self.get(namespace, key)

    def put(self, namespace: str, key: str, value: str, ttl_s: float) -> None:
        self._entries[(namespace, key)] = (value, self.clock() + ttl_s)
        self._entries.move_to_end((namespace, key))
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def remaining_s(self, namespace: str, key: str) -> float | None:
        entry = self._entries.get((namespace, key))
        return None if entry is None else entry[1] - self.clock()

    def delete(self, namespace: str, key: str) -> None:
        self._entries.pop((namespace, key), None)

    def health(self) -> BindingHealth:
        return BindingHealth()

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def binding_key(prefix: str, namespace: str, key: str) -> str:
    """The Redis key of one binding: hash-tagged, names percent-encoded (as the stats keys are)."""
    return f"{{{prefix}:bind:{quote(namespace, safe='')}:{quote(key, safe='')}}}"


class RedisBindingStore:
    """Bindings shared by every replica through Redis, over a local cache.

    Takes an already-built ``redis.asyncio`` client (``decode_responses=True``) and never closes it:
    whoever built it does. ``start`` launches the writer task; ``aclose`` flushes what it can.
    """

    backend: BackendName = "redis"

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        *,
        lookup_timeout_s: float = LOOKUP_TIMEOUT_S,
        clock: Clock = time.monotonic,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.lookup_timeout_s = lookup_timeout_s
        self.local = InMemoryBindingStore(clock)
        self.clock = clock
        self._pending: OrderedDict[tuple[str, str], tuple[str | None, float]] = OrderedDict()
        """(namespace, key) → (value, or None to delete; ttl): the latest write of each key, not yet in Redis."""
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._failures = 0
        self._reason: str | None = None
        self.dropped = 0

    # -- the request path: no waiting beyond the lookup deadline ----------------------------------

    def get(self, namespace: str, key: str) -> str | None:
        return self.local.get(namespace, key)

    async def lookup(self, namespace: str, key: str) -> str | None | Unavailable:
        value = self.local.get(namespace, key)
        if value is not None:
            return value
        pending = self._pending.get((namespace, key))
        if pending is not None:
            return pending[0]
        if self._reason is not None:
            return UNAVAILABLE  # known unreachable: no request waits for it
        redis_key = binding_key(self.prefix, namespace, key)
        try:
            async with asyncio.timeout(self.lookup_timeout_s):
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.get(redis_key)
                    pipe.pttl(redis_key)
                    found, ttl_ms = await pipe.execute()
        except TimeoutError:
            return UNAVAILABLE
        except binding_errors() as exc:
            self._failed(exc)
            return UNAVAILABLE
        if found is None:
            return None
        if isinstance(ttl_ms, int) and ttl_ms > 0:
            self.local.put(namespace, key, str(found), ttl_ms / 1000)
        return str(found)

    def put(self, namespace: str, key: str, value: str, ttl_s: float) -> None:
        self.local.put(namespace, key, value, ttl_s)
        self._queue((namespace, key), value, ttl_s)

    def delete(self, namespace: str, key: str) -> None:
        self.local.delete(namespace, key)
        self._queue((namespace, key), None, 0.0)

    def _queue(self, item: tuple[str, str], value: str | None, ttl_s: float) -> None:
        self._pending[item] = (value, ttl_s)
        self._pending.move_to_end(item)
        while len(self._pending) > PENDING_LIMIT:
            self._pending.popitem(last=False)
            self.dropped += 1
        self._wake.set()

    def health(self) -> BindingHealth:
        return BindingHealth(self._reason is not None, self._reason, self.dropped)

    # -- the background writer ----------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bindings-redis")

    async def aclose(self) -> None:
        self._closing = True
        self._closed.set()
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._pending and self._reason is None:
            try:
                await self.flush()
            except binding_errors() as exc:
                self._failed(exc)
        if self._pending:
            logger.warning("bindings: %d writes not made to Redis at shutdown", len(self._pending))

    async def flush(self) -> None:
        """Write every pending binding now (the writer task does this; tests call it to wait for it)."""
        if not self._pending:
            if self._reason is not None:
                await self.client.ping()  # degraded with nothing to write: is Redis back?
                self._succeeded()
            return
        batch, self._pending = self._pending, OrderedDict()
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for (namespace, key), (value, ttl_s) in batch.items():
                    redis_key = binding_key(self.prefix, namespace, key)
                    if value is None:
                        pipe.delete(redis_key)
                    else:
                        pipe.set(redis_key, value, px=max(1, int(ttl_s * 1000)))
                await pipe.execute()
        except BaseException:
            # Not written (or not known to be): back in front of what was queued meanwhile.
            batch.update(self._pending)
            self._pending = batch
            raise
        self._succeeded()

    async def _run(self) -> None:
        while not self._closing:
            if self._reason is None:
                await self._wake.wait()
            else:
                # Degraded: retry with a growing back-off, whether or not anything is waiting.
                delay = min(BACKOFF_MAX_S, 0.25 * 2 ** min(self._failures - 1, 8))
                try:
                    await asyncio.wait_for(self._closed.wait(), delay)
                except TimeoutError:
                    pass
            self._wake.clear()
            if self._closing:
                return
            await asyncio.sleep(FLUSH_INTERVAL_S)  # gather the writes of a burst into one pipeline
            try:
                await self.flush()
            except binding_errors() as exc:
                self._failed(exc)
            except Exception as exc:
                # The task's outermost handler: a bug here must not stop the writes for good.
                logger.exception("bindings: unexpected error writing to redis")
                self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        reason = f"bindings: redis: {type(exc).__name__}: {exc}"
        if self._reason is None:
            logger.warning("%s; serving with this replica's bindings only, retrying", reason)
        self._reason = reason
        self._wake.set()

    def _succeeded(self) -> None:
        if self._failures:
            logger.info("bindings: redis reachable again after %d failed attempts", self._failures)
        self._failures = 0
        self._reason = None
