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

from gateway.sessions.bindings import UNAVAILABLE, BackendName, Unavailable, binding_errors
from gateway.types import Clock

if TYPE_CHECKING:
    from gateway.redis_client import RedisClient

logger = logging.getLogger("gateway.conversations")
LOOKUP_TIMEOUT_S = 0.5
"""How long a follow-up may wait for Redis on a local miss: without its conversation it cannot be served."""


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
    """Conversations shared by every replica through Redis, over a local cache. Never closes ``client``."""

    backend: BackendName = "redis"

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        local_bytes: int,
        *,
        lookup_timeout_s: float = LOOKUP_TIMEOUT_S,
        clock: Clock = time.monotonic,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.local = InMemoryConversationStore(local_bytes, clock)
        self.lookup_timeout_s = lookup_timeout_s
        self._writes: set[asyncio.Task[None]] = set()

    async def get(self, response_id: str) -> StoredResponse | None | Unavailable:
        value = self.local.lookup(response_id)
        if value is None:
            key = conversation_key(self.prefix, response_id)
            try:
                async with asyncio.timeout(self.lookup_timeout_s):
                    async with self.client.pipeline(transaction=False) as pipe:
                        pipe.get(key)
                        pipe.pttl(key)
                        found, ttl_ms = await pipe.execute()
            except _timeout_or_redis_errors() as exc:
                logger.warning("conversations: cannot read %s from redis: %s", response_id, exc)
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
        self._write(self.client.set(conversation_key(self.prefix, response_id), value, px=max(1, int(ttl_s * 1000))))

    def delete(self, response_id: str) -> None:
        self.local.delete(response_id)
        self._write(self.client.delete(conversation_key(self.prefix, response_id)))

    def _write(self, command: Any) -> None:
        task = asyncio.ensure_future(self._run(command))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _run(self, command: Any) -> None:
        try:
            await command
        except binding_errors() as exc:
            # The local cache still has it: this replica serves its follow-ups; others will not find it.
            logger.warning("conversations: write to redis failed: %s", exc)

    async def aclose(self) -> None:
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
