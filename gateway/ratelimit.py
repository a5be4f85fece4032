"""Per-key rate limits (requests and tokens per minute), in memory or shared by replicas in Redis.

Both backends count with the same sliding-window estimate: per key, a counter for this minute
and one for the previous minute, the previous one weighted by the share of it still inside the
last 60 seconds (``previous × (1 − elapsed/60) + current``). It needs two small counters per key,
has no burst at minute boundaries the way fixed windows do, and is what one atomic Redis script
can check and increment in a single round trip. A request that would pass a limit is refused
without being counted.

In Redis each key's minutes are one hash apiece, ``<prefix>:ratelimit:{<key_id>}:<minute>``
(fields ``r`` and ``t``), hash-tagged per key so that a Redis Cluster keeps a key's two minutes
in one slot (the script reads both), and expiring two minutes after their last write. The client
is the process's request-path one (``gateway.redis_client``): standalone, cluster or Sentinel alike.
A request waits on Redis at most ``redis_request_timeout_s``. If Redis fails, the limiter fails
open to its in-memory twin (each replica then enforces the limits on its own), logs that once,
and tries Redis again after a jittered back-off (``redis_backoff_min_s`` … ``redis_backoff_max_s``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config import StatsConfig
from gateway.redis_client import (
    REDIS_ERRORS,
    Backoff,
    RedisClient,
    RedisConnections,
    RequestCalls,
    describe_error,
)
from gateway.types import Clock

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

    ``acquire`` counts the request if it fits and says so; ``adjust`` corrects the tokens
    counted at admission once the actual usage is known (negative: a refund). Neither raises.
    """

    async def acquire(self, key_id: str, tokens: int, rpm: int, tpm: int) -> RateDecision: ...

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

    async def acquire(self, key_id: str, tokens: int, rpm: int, tpm: int) -> RateDecision:
        now = self.wall_clock()
        window = int(now // WINDOW_S)
        if not rpm and not tpm:
            return RateDecision(True, window)
        c = self._counters(key_id, window)
        counts = Counts(c.previous_requests, c.current_requests, c.previous_tokens, c.current_tokens)
        limit, wait = decide(counts, tokens, rpm, tpm, now)
        if limit is not None:
            return RateDecision(False, window, limit, wait)
        c.current_requests += 1
        c.current_tokens += tokens
        return RateDecision(True, window)

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

    def degraded_reason(self) -> str | None:
        return None

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


# KEYS: this minute's hash, the previous minute's hash.
# ARGV: the previous minute's weight, tokens, rpm (0: none), tpm (0: none), ttl in seconds.
_ACQUIRE = """
local w = tonumber(ARGV[1])
local tokens = tonumber(ARGV[2])
local rpm = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'r', 't')
local prev = redis.call('HMGET', KEYS[2], 'r', 't')
local cr, ct = tonumber(cur[1]) or 0, tonumber(cur[2]) or 0
local pr, pt = tonumber(prev[1]) or 0, tonumber(prev[2]) or 0
local ok = 1
if rpm > 0 and pr * w + cr + 1 > rpm then ok = 0 end
if ok == 1 and tpm > 0 and pt * w + ct + tokens > tpm then ok = 0 end
if ok == 1 then
  redis.call('HINCRBY', KEYS[1], 'r', 1)
  redis.call('HINCRBY', KEYS[1], 't', tokens)
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
end
return {ok, pr, cr, pt, ct}
"""
_TTL_S = 2 * WINDOW_S
_FAILURES: tuple[type[BaseException], ...] = (*REDIS_ERRORS, TimeoutError)


def ratelimit_key(prefix: str, key_id: str, window: int) -> str:
    """One minute of one client key: the ``{key_id}`` tag keeps a key's minutes in one cluster slot."""
    return f"{prefix}:ratelimit:{{{key_id}}}:{window}"


class RedisRateLimiter:
    """Limits shared by every replica through Redis, failing open to ``fallback`` while Redis is down.

    ``from_config(stats, redis)`` uses ``redis``'s request-path client and leaves closing it to its
    owner; without ``redis`` it opens connections of its own and closes them in ``aclose``. A request
    waits at most ``stats.redis_request_timeout_s`` on Redis, and after a failure Redis is skipped for
    a back-off, so a dead Redis costs nothing per request.
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
        self.timeout_s = stats.redis_request_timeout_s
        self.wall_clock = wall_clock
        self.fallback = fallback or InMemoryRateLimiter(wall_clock)
        self.backoff = Backoff.from_config(stats)
        self.calls = RequestCalls(stats)
        self._owned = owned
        self._script = client.register_script(_ACQUIRE)
        self._reason: str | None = None

    @classmethod
    def from_config(cls, stats: StatsConfig, redis: RedisConnections | None = None) -> RedisRateLimiter:
        """Raises ``ConfigError`` if it opens its own connections and a credential's variable is unset."""
        if redis is not None:
            return cls(redis.requests(), stats)
        owned = RedisConnections(stats, os.environ)
        return cls(owned.requests(), stats, owned=owned)

    def _key(self, key_id: str, window: int) -> str:
        return ratelimit_key(self.prefix, key_id, window)

    def _usable(self) -> bool:
        return self.backoff.ready()

    def _failed(self, exc: BaseException) -> None:
        if self._reason is None:
            self._reason = f"rate limiter: Redis unreachable ({describe_error(exc)}); limits enforced per replica"
            logger.warning(
                "rate limits: Redis unreachable (%s); each replica enforces the limits on its own until it returns",
                describe_error(exc),
                # Not a Redis failure but the client library's own: worth its traceback, once.
                exc_info=None if isinstance(exc, _FAILURES) else exc,
            )
        self.backoff.failed()

    def _succeeded(self) -> None:
        if self._reason is not None:
            logger.info("rate limits: Redis reachable again; limits are shared across replicas")
            self._reason = None
        self.backoff.succeeded()

    async def acquire(self, key_id: str, tokens: int, rpm: int, tpm: int) -> RateDecision:
        now = self.wall_clock()
        window = int(now // WINDOW_S)
        if not rpm and not tpm:
            return RateDecision(True, window)
        if not self._usable():
            return await self.fallback.acquire(key_id, tokens, rpm, tpm)
        keys = [self._key(key_id, window), self._key(key_id, window - 1)]
        args: list[str | int] = [repr(_weight(now)), tokens, rpm, tpm, _TTL_S]
        try:
            ok, *raw = await self.calls.run(lambda: self._script(keys=keys, args=args))
        except Exception as exc:
            # Fail open on anything: redis-py's cluster client, mid-failover, can raise what is no
            # RedisError (a connection another task disconnected under it), and a client's request
            # must not fail because the limits' store did.
            self._failed(exc)
            return await self.fallback.acquire(key_id, tokens, rpm, tpm)
        self._succeeded()
        if ok:
            return RateDecision(True, window)
        counts = Counts(*(int(value) for value in raw))
        limit, wait = decide(counts, tokens, rpm, tpm, now)
        # Float rounding may differ from the script's by a hair; the script's refusal stands.
        return RateDecision(False, window, limit or "requests", wait or 1.0)

    async def adjust(self, key_id: str, window: int, tokens: int) -> None:
        current = int(self.wall_clock() // WINDOW_S)
        # Extra usage counts now; a refund goes back to the minute it was taken from, while that minute counts.
        target = current if tokens > 0 else window
        if tokens == 0 or target < current - 1:
            return
        if not self._usable():
            await self.fallback.adjust(key_id, window, tokens)
            return
        key = self._key(key_id, target)

        async def correct() -> None:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hincrby(key, "t", tokens)
                pipe.expire(key, _TTL_S)
                await pipe.execute()

        try:
            await self.calls.run(correct)
        except Exception as exc:  # as in acquire: never fails the caller
            # (No after_failure here: closing the shared cluster client would cut the connections
            # of every request using it; its next single command re-reads the topology anyway.)
            self._failed(exc)
            await self.fallback.adjust(key_id, window, tokens)
            return
        self._succeeded()

    def degraded_reason(self) -> str | None:
        return self._reason

    async def start(self) -> None:
        """Load the script now (a cluster client first reads its topology, a Sentinel's finds the
        master), so that the first request pays for none of it within its timeout. A failure here
        only means the first request tries again."""
        try:
            await self.client.script_load(_ACQUIRE)
        except Exception as exc:  # never fails start-up: requests fail open until Redis answers
            logger.info(
                "rate limits: Redis not ready at start (%s); the first request tries again", describe_error(exc)
            )

    async def aclose(self) -> None:
        await self.calls.aclose()
        if self._owned is not None:
            await self._owned.aclose()


def open_rate_limiter(stats: StatsConfig, redis: RedisConnections | None = None) -> RateLimiter:
    """Shared through Redis when the stats are (``[stats] backend = "redis"``), else in this process."""
    if stats.backend == "redis":
        return RedisRateLimiter.from_config(stats, redis)
    return InMemoryRateLimiter()
