"""Per-key rate limits (requests and tokens per minute), in memory or shared by replicas in Redis.

Both backends count with the same sliding-window estimate: per key, a counter for this minute
and one for the previous minute, the previous one weighted by the share of it still inside the
last 60 seconds (``previous × (1 − elapsed/60) + current``). It needs two small counters per key,
has no burst at minute boundaries the way fixed windows do, and is what one atomic Redis script
can check and increment in a single round trip. A request that would pass a limit is refused
without being counted.

Shared by replicas, a request never waits on Redis. Each replica decides on its own counters (what
it admitted, plus what the others had admitted as of the last reconciliation) and reconciles in
the background every ``flush_interval_s`` (as the stats do): one pipeline pushes what it admitted
since, and reads back every active key's two minutes, the replicas' total. The error bound: a
replica sees the others' admissions at most one reconciliation late (``flush_interval_s`` plus a
round trip), so a key may pass its limit by what the other replicas admit for it in that time
(``(replicas - 1) × rate × flush_interval_s``: a key at 10 requests/s on 4 replicas at the default
0.2 s, about 6 requests); on one replica, never.

In Redis each key's minutes are one hash apiece, ``<prefix>:ratelimit:{<key_id>}:<minute>``
(fields ``r`` and ``t``), hash-tagged per key so that a Redis Cluster keeps a key's two minutes
in one slot, and expiring two minutes after their last write. The client is the process's
background one (``gateway.redis_client``, the stats store's: nothing here is on a request's path),
standalone, cluster or Sentinel alike, each call bounded by ``redis_timeout_s``. If Redis fails, the
replica keeps counting on its own (each then enforces the limits alone, from what it knew), logs that once,
tries Redis again after a jittered back-off (``redis_backoff_min_s`` … ``redis_backoff_max_s``), and
pushes what it counted meanwhile when Redis is back.

Tokens are counted at admission as what the request may use, and corrected to what it did use once
its answer is measured (``adjust``). What it may use is its worst case (prompt + ``max_tokens``) while
that fits, else its likely use (``acquire``'s ``likely_tokens``: prompt + the length most answers of
its kind stay within, the rule the budgets use, ``gateway.admission.access``): an agent's
``max_tokens: 32000`` then weighs what its answers weigh, not 32,000 tokens a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gateway.background import every
from gateway.config import StatsConfig
from gateway.frozen import positional_maker
from gateway.redis_client import Backoff, RedisConnections, describe_error, redis_errors
from gateway.types import Clock

if TYPE_CHECKING:
    from gateway.redis_client import RedisClient

logger = logging.getLogger("gateway.ratelimit")

WINDOW_S = 60
LimitKind = Literal["requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Counts:
    """Requests and tokens counted in the previous and the current minute."""

    previous_requests: int = 0
    current_requests: int = 0
    previous_tokens: int = 0
    current_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RateDecision:
    """``allowed``, or which limit refused and how many seconds until it would let this request in."""

    allowed: bool
    window: int
    """The minute (unix time // 60) the request was counted in; token corrections name it."""
    limit: LimitKind | None = None
    retry_after_s: float = 0.0
    tokens: int = 0
    """The tokens counted for an allowed request: its worst case, or its likely use when only that fit."""


_allowed = positional_maker(RateDecision)  # every allowed request's decision, in field order (``gateway.frozen``)


def _weight(now: float) -> float:
    return 1.0 - (now % WINDOW_S) / WINDOW_S


def _wait_s(previous: int, current: int, need: int, limit: int, now: float) -> float:
    """Seconds until ``previous × weight + current + need ≤ limit`` as the weight decays."""
    elapsed = now % WINDOW_S
    if current + need <= limit:
        if previous <= 0:
            return 0.0
        weight = (limit - current - need) / previous
        return max(0.0, (1.0 - weight) * WINDOW_S - elapsed)
    # This minute alone is over: wait for it to become the previous minute, then for its weight to fall.
    if need > limit:
        return float(WINDOW_S)
    weight = (limit - need) / current
    return (WINDOW_S - elapsed) + max(0.0, (1.0 - weight) * WINDOW_S)


def decide(counts: Counts, tokens: int, rpm: int, tpm: int, now: float) -> tuple[LimitKind | None, float]:
    """Which limit (if any) refuses one more request of ``tokens``, and the wait; shared by both backends."""
    weight = _weight(now)
    if rpm and counts.previous_requests * weight + counts.current_requests + 1 > rpm:
        wait = _wait_s(counts.previous_requests, counts.current_requests, 1, rpm, now)
        return "requests", wait
    if tpm and counts.previous_tokens * weight + counts.current_tokens + tokens > tpm:
        wait = _wait_s(counts.previous_tokens, counts.current_tokens, tokens, tpm, now)
        return "tokens", wait
    return None, 0.0


def retry_after_header(seconds: float) -> str:
    """Whole seconds, at least 1: a client that retries at once would only be refused again."""
    return str(max(1, math.ceil(seconds)))


class RateLimiter(Protocol):
    """Counts requests and tokens per key. ``rpm``/``tpm`` of 0 mean unlimited.

    ``acquire`` counts the request if it fits and says so: with ``tokens`` (its worst case) if they
    fit, else with ``likely_tokens`` when given (``RateDecision.tokens`` says which); ``adjust``
    corrects the tokens counted at admission once the actual usage is known (negative: a refund).
    Neither raises.
    """

    async def acquire(
        self, key_id: str, tokens: int, rpm: int, tpm: int, likely_tokens: int | None = None
    ) -> RateDecision: ...

    async def adjust(self, key_id: str, window: int, tokens: int) -> None: ...

    def degraded_reason(self) -> str | None: ...

    async def start(self) -> None:
        """Get ready before the first request (connect, load scripts); never raises."""

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class _KeyCounters:
    window: int
    previous_requests: int = 0
    current_requests: int = 0
    previous_tokens: int = 0
    current_tokens: int = 0

    def roll(self, window: int) -> None:
        if window == self.window:
            return
        adjacent = window == self.window + 1
        self.previous_requests = self.current_requests if adjacent else 0
        self.previous_tokens = self.current_tokens if adjacent else 0
        self.current_requests = self.current_tokens = 0
        self.window = window


class InMemoryRateLimiter:
    """This process's own counters: the memory backend, and the Redis backend's fallback.

    One small record per key that has made a request; keys come from the config, so this is bounded.
    """

    def __init__(self, wall_clock: Clock = time.time) -> None:
        self.wall_clock = wall_clock
        self._keys: dict[str, _KeyCounters] = {}

    def _counters(self, key_id: str, window: int) -> _KeyCounters:
        counters = self._keys.get(key_id)
        if counters is None:
            counters = self._keys[key_id] = _KeyCounters(window)
        counters.roll(window)
        return counters

    async def acquire(
        self, key_id: str, tokens: int, rpm: int, tpm: int, likely_tokens: int | None = None
    ) -> RateDecision:
        now = self.wall_clock()
        window = int(now // WINDOW_S)
        if not rpm and not tpm:
            return _allowed(True, window, None, 0.0, tokens)
        c = self._counters(key_id, window)
        counts = Counts(c.previous_requests, c.current_requests, c.previous_tokens, c.current_tokens)
        limit, wait = decide(counts, tokens, rpm, tpm, now)
        if limit == "tokens" and likely_tokens is not None and likely_tokens < tokens:
            tokens = likely_tokens
            limit, wait = decide(counts, tokens, rpm, tpm, now)
        if limit is not None:
            return RateDecision(False, window, limit, wait)
        c.current_requests += 1
        c.current_tokens += tokens
        return _allowed(True, window, None, 0.0, tokens)

    async def adjust(self, key_id: str, window: int, tokens: int) -> None:
        current = int(self.wall_clock() // WINDOW_S)
        c = self._keys.get(key_id)
        if c is None or tokens == 0:
            return
        c.roll(current)
        if tokens > 0 or window == current:
            c.current_tokens = max(0, c.current_tokens + tokens)
        elif window == current - 1:
            c.previous_tokens = max(0, c.previous_tokens + tokens)

    def replace(self, key_id: str, window: int, counts: Counts) -> None:
        """Set ``key_id``'s minutes (``window`` and the one before) to ``counts``: the replicas' totals."""
        c = self._counters(key_id, window)
        c.previous_requests, c.current_requests = counts.previous_requests, counts.current_requests
        c.previous_tokens, c.current_tokens = counts.previous_tokens, counts.current_tokens

    def degraded_reason(self) -> str | None:
        return None

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


_TTL_S = 2 * WINDOW_S


def ratelimit_key(prefix: str, key_id: str, window: int) -> str:
    """One minute of one client key: the ``{key_id}`` tag keeps a key's minutes in one cluster slot."""
    return f"{prefix}:ratelimit:{{{key_id}}}:{window}"


class RedisRateLimiter:
    """Limits shared by every replica through Redis, counted here and reconciled in the background.

    ``from_config(stats, redis)`` uses ``redis``'s background client (the stats store's pool and
    timeouts: nothing here is on a request's path) and leaves closing it to its owner; without
    ``redis`` it opens connections of its own and closes them in ``aclose``. ``fallback`` holds this
    replica's view (its own admissions and the others' as last read); ``start`` begins the
    reconciliation every ``flush_interval_s``, ``sync`` runs one.
    """

    def __init__(
        self,
        client: RedisClient,
        stats: StatsConfig,
        *,
        fallback: InMemoryRateLimiter | None = None,
        wall_clock: Clock = time.time,
        owned: RedisConnections | None = None,
    ) -> None:
        self.client = client
        self.prefix = stats.key_prefix
        self.interval_s = stats.flush_interval_s
        self.wall_clock = wall_clock
        self.fallback = fallback or InMemoryRateLimiter(wall_clock)
        """The local view every decision is made on (the name is the old one: it was the fallback)."""
        self.backoff = Backoff.from_config(stats)
        self._owned = owned
        self._reason: str | None = None
        self._pending: dict[tuple[str, int], list[int]] = {}
        """(key, minute) → [requests, tokens] counted here and not yet pushed to Redis."""
        self._active: dict[str, int] = {}
        """Keys limited lately → the last minute they were used in: whose totals each reconciliation reads."""
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_config(cls, stats: StatsConfig, redis: RedisConnections | None = None) -> RedisRateLimiter:
        """Raises ``ConfigError`` if it opens its own connections and a credential's variable is unset."""
        if redis is not None:
            return cls(redis.background(), stats)
        owned = RedisConnections(stats, os.environ)
        return cls(owned.background(), stats, owned=owned)

    def _key(self, key_id: str, window: int) -> str:
        return ratelimit_key(self.prefix, key_id, window)

    def _failed(self, exc: BaseException) -> None:
        if self._reason is None:
            self._reason = f"rate limiter: Redis unreachable ({describe_error(exc)}); limits enforced per replica"
            logger.warning(
                "rate limits: Redis unreachable (%s); each replica enforces the limits on its own until it returns",
                describe_error(exc),
                # Not a Redis failure but the client library's own: worth its traceback, once.
                exc_info=None if isinstance(exc, (*redis_errors(), TimeoutError)) else exc,
            )
        self.backoff.failed()

    def _succeeded(self) -> None:
        if self._reason is not None:
            logger.info("rate limits: Redis reachable again; limits are shared across replicas")
            self._reason = None
        self.backoff.succeeded()

    def _owe(self, key_id: str, window: int, requests: int, tokens: int) -> None:
        owed = self._pending.get((key_id, window))
        if owed is None:
            owed = self._pending[(key_id, window)] = [0, 0]
        owed[0] += requests
        owed[1] += tokens

    async def acquire(
        self, key_id: str, tokens: int, rpm: int, tpm: int, likely_tokens: int | None = None
    ) -> RateDecision:
        decision = await self.fallback.acquire(key_id, tokens, rpm, tpm, likely_tokens)
        if rpm or tpm:
            self._active[key_id] = decision.window
            if decision.allowed:
                self._owe(key_id, decision.window, 1, decision.tokens)
        return decision

    async def adjust(self, key_id: str, window: int, tokens: int) -> None:
        current = int(self.wall_clock() // WINDOW_S)
        # Extra usage counts now; a refund goes back to the minute it was taken from, while that minute counts.
        target = current if tokens > 0 else window
        if tokens == 0 or target < current - 1:
            return
        await self.fallback.adjust(key_id, window, tokens)
        self._owe(key_id, target, 0, tokens)

    async def sync(self) -> None:
        """One reconciliation: push what this replica counted since the last, read the active keys' totals back."""
        current = int(self.wall_clock() // WINDOW_S)
        if not self.backoff.ready():
            self._pending = {slot: owed for slot, owed in self._pending.items() if slot[1] >= current - 1}
            return
        self._active = {key: window for key, window in self._active.items() if window >= current - 1}
        keys = list(self._active)
        # Minutes that no longer count are not pushed (nor kept through a long outage).
        pending = {slot: owed for slot, owed in self._pending.items() if slot[1] >= current - 1}
        self._pending = {}
        try:
            replies = await self._exchange(pending, keys, current)  # bounded by the client's socket timeouts
        except Exception as exc:  # never fails a caller: the counts stay here, pushed at the next try
            # (Fail open on anything: redis-py's cluster client, mid-failover, can raise what is no RedisError.)
            self._failed(exc)
            for (key_id, window), (requests, tokens) in pending.items():
                self._owe(key_id, window, requests, tokens)
            return
        self._succeeded()
        for index, key_id in enumerate(keys):
            now_r, now_t = _pair(replies[2 * index])
            before_r, before_t = _pair(replies[2 * index + 1])
            # What was admitted here during the round trip is not in Redis yet: it stays counted.
            late_now = self._pending.get((key_id, current), [0, 0])
            late_before = self._pending.get((key_id, current - 1), [0, 0])
            counts = Counts(
                before_r + late_before[0], now_r + late_now[0], before_t + late_before[1], now_t + late_now[1]
            )
            self.fallback.replace(key_id, current, counts)

    async def _exchange(self, pending: dict[tuple[str, int], list[int]], keys: list[str], current: int) -> list[Any]:
        """One pipeline: the increments, then each key's two minutes (the reads' replies, in order)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for (key_id, window), (requests, tokens) in pending.items():
                name = self._key(key_id, window)
                pipe.hincrby(name, "r", requests)
                pipe.hincrby(name, "t", tokens)
                pipe.expire(name, _TTL_S)
            for key_id in keys:
                pipe.hmget(self._key(key_id, current), ["r", "t"])
                pipe.hmget(self._key(key_id, current - 1), ["r", "t"])
            replies = await pipe.execute()
        return list(replies[3 * len(pending) :])

    def degraded_reason(self) -> str | None:
        return self._reason

    async def start(self) -> None:
        """Begin reconciling in the background; never raises (a Redis not ready yet is tried again)."""
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        await every(lambda: self.interval_s, self.sync, "rate limit sync")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.sync()  # what this replica counted last still counts for the others
        if self._owned is not None:
            await self._owned.aclose()


def _pair(reply: Any) -> tuple[int, int]:
    """An ``HMGET r t`` reply as (requests, tokens); a missing hash or field is 0."""
    values = [int(v) if v is not None else 0 for v in (reply or ())]
    values += [0, 0]
    return values[0], values[1]


def open_rate_limiter(stats: StatsConfig, redis: RedisConnections | None = None) -> RateLimiter:
    """Shared through Redis when the stats are (``[stats] backend = "redis"``), else in this process."""
    if stats.backend == "redis":
        return RedisRateLimiter.from_config(stats, redis)
    return InMemoryRateLimiter()
