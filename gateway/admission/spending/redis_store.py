"""Budgets and spend shared by every replica through Redis (``[stats] backend = "redis"``).

Layout (``<p>`` is ``[stats] key_prefix``, ``<tag>`` ``t:<team>`` for a key in a team, else
``k:<key_id>``)::

    <p>:budget:{<tag>}:<kind>:<ident>:<period>         hash: spent, reserved (nano-dollars)
    <p>:budget:{<tag>}:<kind>:<ident>:<period>:holds   zset: "<hold id>:<amount>" scored by expiry
    <p>:spend:{<tag>}:<window>:<period>                hash: c|<row> cost, n|<row> attempts

Why the tag: a reservation must check and raise a key's budget and its team's budget in one
atomic step, and a Redis Cluster runs a multi-key script only when all its keys hash to one slot.
Tagging every key of a team (and of its keys) with the team keeps them in one slot, so one
script does it all: no window in which the key's hold is taken and the team's is not, and no
compensating release to get wrong. The cost is that one team's counters live on one shard,
which is a few small hashes.

If Redis cannot be reached, budgets fail closed: a request whose key or team has a budget is
refused with 503 ``budget_unavailable`` (a budget is a promise about money; an outage must not
turn it into unlimited spend on every replica at once), while keys without a budget are served
as usual. Settlements that cannot be written are kept (up to ``PENDING_LIMIT``) and written, in
order, once Redis answers again; holds they would have released expire on their own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.admission.spending.store import (
    Balance,
    Booking,
    HeldScope,
    Hold,
    Refusal,
    SpendRow,
    SpendStoreDown,
    breakdown_periods,
)
from gateway.admission.spending.windows import Period
from gateway.config import StatsConfig
from gateway.redis_client import RedisClient, RedisConnections

logger = logging.getLogger("gateway.spending")

OPERATION_TIMEOUT_S = 1.0
"""The longest a request waits on Redis for its reservation (a connection from the pool included)."""
PENDING_LIMIT = 10_000
COUNTER_GRACE_S = 86_400
"""Budget counters outlive their period by a day (they are no longer read after it)."""
BREAKDOWN_RETENTION_S = {"day": 7 * 86_400, "week": 35 * 86_400, "month": 100 * 86_400}
"""How long past its end a period's breakdown stays readable."""

# KEYS: per scope, its counters hash and its holds zset.
# ARGV: now, expiry, member ("" = only read), amount, then per scope: limit (-1 = no check), ttl.
# Returns {ok, refused scope (1-based, 0 if none), then spent, reserved per scope as read}.
_RESERVE = """
local now, expiry, member, amount = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local n = #KEYS / 2
local out = {1, 0}
for i = 1, n do
  local h, z = KEYS[2 * i - 1], KEYS[2 * i]
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  if #expired > 0 then
    local freed = 0
    for _, m in ipairs(expired) do freed = freed + tonumber(string.match(m, ':(%d+)$')) end
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
    redis.call('HINCRBY', h, 'reserved', -freed)
  end
  local v = redis.call('HMGET', h, 'spent', 'reserved')
  local spent, reserved = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  out[2 * i + 1], out[2 * i + 2] = spent, reserved
  local limit = tonumber(ARGV[3 + 2 * i])
  if out[1] == 1 and limit >= 0 and spent + reserved + amount > limit then
    out[1], out[2] = 0, i
  end
end
if out[1] == 1 and member ~= '' then
  for i = 1, n do
    redis.call('HINCRBY', KEYS[2 * i - 1], 'reserved', amount)
    redis.call('ZADD', KEYS[2 * i], expiry, member)
    redis.call('EXPIRE', KEYS[2 * i - 1], ARGV[4 + 2 * i])
    redis.call('EXPIRE', KEYS[2 * i], ARGV[4 + 2 * i])
  end
end
return out
"""

# KEYS: per scope, its counters hash and holds zset; then the day, week and month breakdown hashes.
# ARGV: member ("" = no hold), amount, total, scope count, per scope ttl, per breakdown ttl (3),
# row count, then per row: field, cost, attempts.
_SETTLE = """
local member, amount, total, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 1, n do
  local h, z = KEYS[2 * i - 1], KEYS[2 * i]
  if member ~= '' and redis.call('ZREM', z, member) == 1 then
    redis.call('HINCRBY', h, 'reserved', -amount)
  end
  if total ~= 0 then redis.call('HINCRBY', h, 'spent', total) end
  redis.call('EXPIRE', h, ARGV[4 + i])
end
local base = 4 + n
local m = tonumber(ARGV[base + 4])
if m > 0 then
  for j = 1, 3 do
    local key = KEYS[2 * n + j]
    for r = 0, m - 1 do
      local field = ARGV[base + 5 + 3 * r]
      redis.call('HINCRBY', key, 'c|' .. field, ARGV[base + 6 + 3 * r])
      redis.call('HINCRBY', key, 'n|' .. field, ARGV[base + 7 + 3 * r])
    end
    redis.call('EXPIRE', key, ARGV[base + j])
  end
end
return 1
"""


_Settlement = tuple[Hold | None, str, float, tuple[Booking, ...]]
_ERRORS = (RedisError, OSError, TimeoutError)


class RedisSpendStore:
    """Implements ``SpendStore`` on a ``redis.asyncio`` client it owns (closed by ``aclose``)."""

    def __init__(self, client: RedisClient, prefix: str, *, retry_s: float = 1.0, owns_client: bool = False) -> None:
        self.client = client
        self._owns_client = owns_client
        """Close ``client`` with the store (one made apart from a ``RedisConnections``, e.g. by a tool)."""
        self.prefix = prefix
        self.retry_s = retry_s
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._pending: deque[_Settlement] = deque(maxlen=PENDING_LIMIT)
        self._lost = 0
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._reason: str | None = None
        self._drain_task: asyncio.Task[None] | None = None

    @classmethod
    def from_config(cls, stats: StatsConfig, redis: RedisConnections) -> RedisSpendStore:
        """On the request-path client of ``redis`` (``gateway.redis_client``), which it never closes."""
        return cls(redis.requests(), stats.key_prefix)

    # -- keys -----------------------------------------------------------------------------------

    def _budget_keys(self, held: HeldScope) -> tuple[str, str]:
        scope = held.scope
        base = f"{self.prefix}:budget:{{{scope.tag}}}:{scope.kind}:{scope.ident}:{held.period.id}"
        return base, base + ":holds"

    def _breakdown_key(self, tag: str, period: Period) -> str:
        return f"{self.prefix}:spend:{{{tag}}}:{period.window}:{period.id}"

    # -- health ---------------------------------------------------------------------------------

    def _usable(self) -> bool:
        return self._down_since is None or time.monotonic() >= self._retry_at

    def _failed(self, exc: BaseException) -> None:
        if not isinstance(exc, RedisConnectionError | OSError):
            # A slow answer refuses the request that waited for it, but is no outage: the next
            # request tries again rather than being refused for ``retry_s`` too.
            return
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._reason = f"budgets: Redis unreachable ({_describe(exc)}); requests under a budget are refused"
            logger.warning(
                "budgets: Redis unreachable (%s); requests of keys with a budget are refused until it returns",
                _describe(exc),
            )
        self._retry_at = time.monotonic() + self.retry_s

    async def _succeeded(self) -> None:
        if self._down_since is not None:
            logger.info("budgets: Redis reachable again")
            self._down_since = None
            self._reason = None
        if self._pending and self._drain_task is None:
            # In the background: a reservation must not wait for an outage's backlog to be written.
            self._drain_task = asyncio.ensure_future(self._drain())

    def degraded_reason(self) -> str | None:
        return self._reason

    # -- SpendStore -----------------------------------------------------------------------------

    async def _run_reserve(self, held: Sequence[HeldScope], now: float, args: list[Any], check: bool) -> list[int]:
        keys: list[str] = []
        for one in held:
            keys.extend(self._budget_keys(one))
            limit = one.scope.budget.limit_nanos if check else -1
            args.extend([limit, int(one.period.resets_at - now) + COUNTER_GRACE_S])
        if not self._usable():
            raise SpendStoreDown(self._reason or "Redis unreachable")
        try:
            async with asyncio.timeout(OPERATION_TIMEOUT_S):
                raw = await self._reserve(keys=keys, args=args)
        except _ERRORS as exc:
            self._failed(exc)
            raise SpendStoreDown(self._reason or "Redis unreachable") from exc
        await self._succeeded()
        return [int(value) for value in raw]

    async def reserve(self, hold: Hold, now: float) -> Refusal | None:
        member = f"{hold.id}:{hold.amount}"
        args = [repr(now), repr(hold.expires_at), member, hold.amount]
        raw = await self._run_reserve(hold.scopes, now, args, check=True)
        ok, refused = raw[0], raw[1]
        if ok:
            return None
        index = refused - 1
        return Refusal(hold.scopes[index], raw[2 + 2 * index], raw[3 + 2 * index], hold.amount)

    async def balances(self, held: Sequence[HeldScope], now: float) -> list[Balance]:
        if not held:
            return []
        raw = await self._run_reserve(held, now, [repr(now), "0", "", 0], check=False)
        return [Balance(one, raw[2 + 2 * i], raw[3 + 2 * i]) for i, one in enumerate(held)]

    async def settle(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None:
        settlement: _Settlement = (hold, tag, at, tuple(bookings))
        if not self._usable():
            self._keep(settlement)
            return
        try:
            await self._write(settlement)
        except _ERRORS as exc:
            self._failed(exc)
            self._keep(settlement)
            return
        await self._succeeded()

    def _keep(self, settlement: _Settlement) -> None:
        if len(self._pending) == self._pending.maxlen:
            self._lost += 1
            logger.error("budgets: %d settlements could not be kept while Redis was down", self._lost)
        self._pending.append(settlement)

    async def _drain(self) -> None:
        try:
            while self._pending:
                try:
                    await self._write(self._pending[0])
                except _ERRORS as exc:
                    self._failed(exc)
                    return
                self._pending.popleft()
        finally:
            self._drain_task = None

    async def _write(self, settlement: _Settlement) -> None:
        hold, tag, at, bookings = settlement
        now = time.time()
        keys: list[str] = []
        scope_ttls: list[int] = []
        for held in hold.scopes if hold is not None else ():
            counters, holds = self._budget_keys(held)
            keys.extend([counters, holds])
            scope_ttls.append(max(1, int(held.period.resets_at - now) + COUNTER_GRACE_S))
        periods = breakdown_periods(at)
        keys.extend(self._breakdown_key(tag, period) for period in periods)
        rows: dict[str, list[int]] = {}
        for booking in bookings:
            row = rows.setdefault(json.dumps(booking.row, separators=(",", ":")), [0, 0])
            row[0] += booking.cost
            row[1] += 1
        args: list[Any] = [
            f"{hold.id}:{hold.amount}" if hold is not None else "",
            hold.amount if hold is not None else 0,
            sum(b.cost for b in bookings),
            len(scope_ttls),
            *scope_ttls,
            *(max(1, int(p.resets_at - now) + BREAKDOWN_RETENTION_S[p.window]) for p in periods),
            len(rows),
        ]
        for field, (cost, attempts) in rows.items():
            args.extend([field, cost, attempts])
        async with asyncio.timeout(OPERATION_TIMEOUT_S):
            await self._settle(keys=keys, args=args)

    async def rows(self, period: Period, tags: Sequence[str]) -> list[SpendRow]:
        if not self._usable():
            raise SpendStoreDown(self._reason or "Redis unreachable")
        try:
            async with asyncio.timeout(OPERATION_TIMEOUT_S * 4):
                async with self.client.pipeline(transaction=False) as pipe:
                    for tag in tags:
                        pipe.hgetall(self._breakdown_key(tag, period))
                    tables = await pipe.execute()
        except _ERRORS as exc:
            self._failed(exc)
            raise SpendStoreDown(self._reason or "Redis unreachable") from exc
        await self._succeeded()
        found: list[SpendRow] = []
        for table in tables:
            costs: dict[str, int] = {}
            counts: dict[str, int] = {}
            for raw_field, raw_value in table.items():
                field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
                kind, _, row = field.partition("|")
                (costs if kind == "c" else counts)[row] = int(raw_value)
            for row, cost in costs.items():
                key_id, team, model, provider, deployment = json.loads(row)
                found.append(SpendRow(key_id, team, model, provider, deployment, cost, counts.get(row, 0)))
        return found

    async def aclose(self) -> None:
        if self._drain_task is not None:
            await self._drain_task
        if self._pending and self._usable():
            await self._drain()
        if self._owns_client:
            await self.client.aclose()
        # Otherwise the client is shared (``RedisConnections.requests``): its owner closes it.


def _describe(exc: BaseException) -> str:
    """A short description of a Redis failure; redis-py's messages name host and port, never a password."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    return (str(exc) or type(exc).__name__)[:200]
