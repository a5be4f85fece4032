"""Responses conversations the gateway keeps itself: each stored answer's input and output items, by its id.

Why: a deployment reached by translation (a chat provider) keeps no Responses state, yet a client
may send ``store: true`` and then ``previous_response_id``, or ``GET /v1/responses/{id}``. The gateway
keeps what the provider would: the response object, the whole input it answered (earlier turns
included) and its output items (``gateway.conversation_flow`` expands a follow-up from them before
routing, and captures each answer after it). ``store: false`` keeps nothing.

Two backends behind one Protocol, as the bindings are (``gateway.sessions.bindings``): in this process,
bounded by bytes (least recently used out first), or in Redis (``SET key value PX ttl``; one
hash-tagged key per response, ``{<prefix>:conv:<id>}``) over a local cache of the same kind. A write
goes to the local cache at once and to Redis in a background task; a read asks the local cache, then
Redis within ``lookup_timeout_s``, and answers ``UNAVAILABLE`` when it cannot tell. Usage::

    store.put("resp_1", StoredResponse(...), ttl_s=86400)
    stored = await store.get("resp_1")     # StoredResponse, None (unknown) or UNAVAILABLE
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from gateway.background import log_failure
from gateway.redis_failures import Backoff, describe_error
from gateway.sessions.bindings import UNAVAILABLE, BackendName, Unavailable, binding_errors
from gateway.types import Clock

if TYPE_CHECKING:
    from gateway.redis_client import RedisClient

logger = logging.getLogger("gateway.conversations")
LOOKUP_TIMEOUT_S = 0.5
"""How long a follow-up may wait for Redis on a local miss: without its conversation it cannot be served."""
UNWRITTEN_LIMIT = 100_000
"""Ids kept for Redis while it fails; past this, the oldest are not written (their values stay local)."""


def _timeout_or_redis_errors() -> tuple[type[BaseException], ...]:
    """``TimeoutError`` or a Redis failure (``binding_errors``), read when an exception reaches the ``except``."""
    return (TimeoutError, *binding_errors())


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One answer the gateway keeps: for ``GET /v1/responses/{id}``, ``…/input_items`` and follow-ups."""

    model: str
    """The client-facing model it was asked of."""
    scope: str
    """The client key's id: only the same key (or one in the same scope) may read or continue it."""
    input: list[Any]
    """Every input item it answered: the earlier turns' inputs and outputs, then this request's input."""
    output: list[Any]
    """Its output items, as the client received them."""
    response: dict[str, Any]
    """The whole response object the client received (its ``response.completed`` event's, or the body)."""

    def encode(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def decode(cls, value: str) -> StoredResponse | None:
        try:
            data = json.loads(value)
            return cls(
                str(data["model"]),
                str(data["scope"]),
                list(data["input"]),
                list(data["output"]),
                dict(data["response"]),
            )
        except (ValueError, KeyError, TypeError):
            return None  # not a value this gateway wrote


class ConversationStore(Protocol):
    """See the module docstring. Used on the event loop only."""

    backend: BackendName

    async def get(self, response_id: str) -> StoredResponse | None | Unavailable: ...

    def put(self, response_id: str, stored: StoredResponse, ttl_s: float) -> None: ...

    def delete(self, response_id: str) -> None: ...

    def degraded_reason(self) -> str | None:
        """Why the conversations are not shared now (``/readyz``); None when they are."""
        ...

    async def aclose(self) -> None: ...


class InMemoryConversationStore:
    """Conversations in this process, bounded by the size of their encoded values; each with its own expiry."""

    backend: BackendName = "memory"

    def __init__(self, max_bytes: int, clock: Clock = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.clock = clock
        self.size = 0
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def lookup(self, response_id: str) -> str | None:
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        value, expires = entry
        if expires <= self.clock():
            self._drop(response_id)
            return None
        self._entries.move_to_end(response_id)
        return value

    async def get(self, response_id: str) -> StoredResponse | None | Unavailable:
        value = self.lookup(response_id)
        return StoredResponse.decode(value) if value is not None else None

    def entry(self, response_id: str) -> tuple[str, float] | None:
        """The value kept under ``response_id`` and its seconds left; None if none (or expired)."""
        value = self.lookup(response_id)
        return None if value is None else (value, self._entries[response_id][1] - self.clock())

    def degraded_reason(self) -> str | None:
        return None

    def keep(self, response_id: str, value: str, ttl_s: float) -> None:
        self._drop(response_id)
        if len(value) > self.max_bytes:
            return  # larger than the whole budget: never kept here
        self._entries[response_id] = (value, self.clock() + ttl_s)
        self.size += len(value)
        while self.size > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def put(self, response_id: str, stored: StoredResponse, ttl_s: float) -> None:
        self.keep(response_id, stored.encode(), ttl_s)

    def delete(self, response_id: str) -> None:
        self._drop(response_id)

    def _drop(self, response_id: str) -> None:
        entry = self._entries.pop(response_id, None)
        if entry is not None:
            self.size -= len(entry[0])

    async def aclose(self) -> None:
        pass


def conversation_key(prefix: str, response_id: str) -> str:
    return f"{{{prefix}:conv:{quote(response_id, safe='')}}}"


class RedisConversationStore:
    """Conversations shared by every replica through Redis, over a local cache. Never closes ``client``.

    While Redis fails (one warning; ``degraded_reason`` on ``/readyz``) no request waits on it: a local miss
    answers ``UNAVAILABLE`` at once, and what this replica keeps meanwhile is noted (the ids only: the values
    stay in the local cache, which bounds them) and written by a background retry, after a ``Backoff``, once
    Redis answers again, so that the other replicas can continue those conversations.
    """

    backend: BackendName = "redis"

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        local_bytes: int,
        *,
        lookup_timeout_s: float = LOOKUP_TIMEOUT_S,
        clock: Clock = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.local = InMemoryConversationStore(local_bytes, clock)
        self.lookup_timeout_s = lookup_timeout_s
        self.backoff = backoff or Backoff(0.25, 5.0, clock)
        self._writes: set[asyncio.Task[None]] = set()
        self._reason: str | None = None
        self._unwritten: OrderedDict[str, bool] = OrderedDict()
        """Ids changed here while Redis failed, oldest first: True to write the local value, False to delete."""
        self._retry: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()

    def degraded_reason(self) -> str | None:
        return self._reason

    async def get(self, response_id: str) -> StoredResponse | None | Unavailable:
        value = self.local.lookup(response_id)
        if value is None:
            if self._unwritten.get(response_id) is False:
                return None  # deleted here while Redis was away
            if self._reason is not None:
                return UNAVAILABLE  # known unreachable: no request waits for it
            key = conversation_key(self.prefix, response_id)
            try:
                async with asyncio.timeout(self.lookup_timeout_s):
                    async with self.client.pipeline(transaction=False) as pipe:
                        pipe.get(key)
                        pipe.pttl(key)
                        found, ttl_ms = await pipe.execute()
            except _timeout_or_redis_errors() as exc:
                self._failed(exc)
                return UNAVAILABLE
            if found is None:
                return None
            value = str(found)
            if isinstance(ttl_ms, int) and ttl_ms > 0:
                self.local.keep(response_id, value, ttl_ms / 1000)
        return StoredResponse.decode(value)

    def put(self, response_id: str, stored: StoredResponse, ttl_s: float) -> None:
        value = stored.encode()
        self.local.keep(response_id, value, ttl_s)
        self._write(response_id, value, ttl_s)

    def delete(self, response_id: str) -> None:
        self.local.delete(response_id)
        self._write(response_id, None, 0.0)

    def _write(self, response_id: str, value: str | None, ttl_s: float) -> None:
        if self._reason is not None:
            self._note_unwritten(response_id, value is not None)  # written by the retry once Redis is back
            return
        task = asyncio.ensure_future(self._send(response_id, value, ttl_s))
        task.add_done_callback(log_failure("conversations: writing to redis"))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _send(self, response_id: str, value: str | None, ttl_s: float) -> None:
        key = conversation_key(self.prefix, response_id)
        try:
            if value is None:
                await self.client.delete(key)
            else:
                await self.client.set(key, value, px=max(1, int(ttl_s * 1000)))
        except binding_errors() as exc:
            self._note_unwritten(response_id, value is not None)
            self._failed(exc)

    def _note_unwritten(self, response_id: str, write: bool) -> None:
        self._unwritten[response_id] = write
        self._unwritten.move_to_end(response_id)
        while len(self._unwritten) > UNWRITTEN_LIMIT:
            self._unwritten.popitem(last=False)

    def _failed(self, exc: BaseException) -> None:
        if self._reason is not None:
            return  # the retry task owns the back-off until Redis is back
        self._reason = f"conversations: Redis unreachable ({describe_error(exc)}); kept per replica"
        logger.warning(
            "conversations: Redis unreachable (%s); follow-ups of conversations kept by other replicas "
            "are refused, this replica's are kept and written once it returns",
            describe_error(exc),
        )
        self.backoff.failed()
        if self._retry is None and not self._closed.is_set():
            self._retry = asyncio.ensure_future(self._retry_until_back())

    async def _retry_until_back(self) -> None:
        """After each back-off, write what was kept (or PING with nothing kept) until Redis takes it."""
        try:
            while self._reason is not None:
                pause = max(0.0, self.backoff.retry_at - self.backoff.clock())
                try:
                    await asyncio.wait_for(self._closed.wait(), pause)
                    return
                except TimeoutError:
                    pass
                try:
                    await self._write_unwritten()
                except Exception as exc:  # the task's outermost handler: it must not stop retrying
                    if not isinstance(exc, _timeout_or_redis_errors()):
                        logger.exception("conversations: unexpected error writing to redis")
                    self.backoff.failed()
                    continue
                written, self._reason = len(self._unwritten), None
                self._unwritten.clear()
                self.backoff.succeeded()
                logger.info("conversations: Redis reachable again; %d kept changes written", written)
        finally:
            self._retry = None

    async def _write_unwritten(self) -> None:
        async with asyncio.timeout(max(self.lookup_timeout_s, 1.0)):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.ping()
                for response_id, write in self._unwritten.items():
                    key = conversation_key(self.prefix, response_id)
                    entry = self.local.entry(response_id) if write else None
                    if entry is not None:
                        pipe.set(key, entry[0], px=max(1, int(entry[1] * 1000)))
                    elif not write:
                        pipe.delete(key)
                    # else: expired or pushed out of the local cache meanwhile: nothing left to write
                await pipe.execute()

    async def aclose(self) -> None:
        self._closed.set()
        if self._retry is not None:
            await self._retry
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)


__all__ = [
    "ConversationStore",
    "InMemoryConversationStore",
    "RedisConversationStore",
    "StoredResponse",
    "UNAVAILABLE",
    "conversation_key",
]
