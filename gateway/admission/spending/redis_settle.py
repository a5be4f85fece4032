"""Settlements on their way to Redis: a batch of them as the fewest ``_SETTLE`` script calls.

``RedisSpendStore.settle`` queues a request's settlement; one background writer sends what is queued
in one pipeline per round trip (``gateway.admission.spending.redis_store``). This module builds that
pipeline's calls. A settlement with a hold is one call of its own (its hold's member, amount and
budget counters). Settlements without a hold (a key under no budget: every request of a gateway
without budgets) only add cost and attempts to their spender's breakdown rows in the day, week and
month they were made in: those of one spender and the same three periods are summed into one call.
``HINCRBY`` adds up, so Redis ends with the same counters as when each was sent alone; the keys a call
touches are its spender's, hash-tagged alike, so each call still lives in one Redis Cluster slot.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError

from gateway.admission.spending.store import Booking, HeldScope, Hold, breakdown_periods
from gateway.admission.spending.windows import Period
from gateway.redis_client import RedisClient

COUNTER_GRACE_S = 86_400
"""Budget counters outlive their period by a day (they are no longer read after it)."""
BREAKDOWN_RETENTION_S = {"day": 7 * 86_400, "week": 35 * 86_400, "month": 100 * 86_400}
"""How long past its end a period's breakdown stays readable."""

# KEYS: per scope, its counters hash and holds zset; then the day, week and month breakdown hashes.
# ARGV: member ("" = no hold), amount, total, scope count, per scope ttl, per breakdown ttl (3),
# row count, then per row: field, cost, attempts. Never ``HINCRBY … -0``: Lua's -0 reaches Redis as "-0", which
# is no integer to it, and the call would fail on every retry (a hold of a free deployment is 0).
SETTLE = """
local member, amount, total, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 1, n do
  local h, z = KEYS[2 * i - 1], KEYS[2 * i]
  if member ~= '' and redis.call('ZREM', z, member) == 1 and amount ~= 0 then
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

Settlement = tuple[Hold | None, str, float, tuple[Booking, ...]]
"""A request's hold (None: no budget), its spender's shard tag, when it was settled, and its bookings."""


def budget_keys(prefix: str, held: HeldScope) -> tuple[str, str]:
    """The counters hash and the holds zset of one budget in one period."""
    scope = held.scope
    base = f"{prefix}:budget:{{{scope.tag}}}:{scope.kind}:{scope.ident}:{held.period.id}"
    return base, base + ":holds"


def breakdown_key(prefix: str, tag: str, period: Period) -> str:
    return f"{prefix}:spend:{{{tag}}}:{period.window}:{period.id}"


@dataclass(slots=True)
class SettleCall:
    """One ``_SETTLE`` call and the settlements it carries (their indexes in the batch)."""

    keys: list[str]
    args: list[Any]
    carries: list[int] = field(default_factory=list)


class _Rows:
    """Cost and attempts per breakdown row, in the order rows first came (the field: the row as JSON)."""

    __slots__ = ("rows", "total")

    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = {}
        self.total = 0

    def add(self, bookings: Sequence[Booking], fields: dict[tuple[str, ...], str]) -> None:
        rows = self.rows
        for booking in bookings:
            key = booking.row
            name = fields.get(key)
            if name is None:
                name = fields[key] = json.dumps(key, separators=(",", ":"))
            row = rows.get(name)
            if row is None:
                row = rows[name] = [0, 0]
            row[0] += booking.cost
            row[1] += 1
            self.total += booking.cost


def _call(prefix: str, hold: Hold | None, tag: str, periods: Sequence[Period], rows: _Rows, now: float) -> SettleCall:
    keys: list[str] = []
    scope_ttls: list[int] = []
    for held in hold.scopes if hold is not None else ():
        keys.extend(budget_keys(prefix, held))
        scope_ttls.append(max(1, int(held.period.resets_at - now) + COUNTER_GRACE_S))
    keys.extend(breakdown_key(prefix, tag, period) for period in periods)
    args: list[Any] = [
        f"{hold.id}:{hold.amount}" if hold is not None else "",
        hold.amount if hold is not None else 0,
        rows.total,
        len(scope_ttls),
        *scope_ttls,
        *(max(1, int(p.resets_at - now) + BREAKDOWN_RETENTION_S[p.window]) for p in periods),
        len(rows.rows),
    ]
    for name, (cost, attempts) in rows.rows.items():
        args.extend((name, cost, attempts))
    return SettleCall(keys, args)


def settle_calls(prefix: str, batch: Sequence[Settlement], now: float) -> list[SettleCall]:
    """The calls that write ``batch``: one per settlement with a hold, one per (spender, periods) without."""
    calls: list[SettleCall] = []
    shared: dict[tuple[str, ...], tuple[str, list[Period], _Rows, list[int]]] = {}
    fields: dict[tuple[str, ...], str] = {}
    for index, (hold, tag, at, bookings) in enumerate(batch):
        periods = breakdown_periods(at)
        if hold is not None:
            rows = _Rows()
            rows.add(bookings, fields)
            call = _call(prefix, hold, tag, periods, rows, now)
            call.carries.append(index)
            calls.append(call)
            continue
        group = (tag, *(period.id for period in periods))
        entry = shared.get(group)
        if entry is None:
            entry = shared[group] = (tag, periods, _Rows(), [])
        entry[2].add(bookings, fields)
        entry[3].append(index)
    for tag, periods, rows, carried in shared.values():
        call = _call(prefix, None, tag, periods, rows, now)
        call.carries.extend(carried)
        calls.append(call)
    return calls


__all__ = [
    "BREAKDOWN_RETENTION_S",
    "COUNTER_GRACE_S",
    "SETTLE",
    "SettleCall",
    "Settlement",
    "breakdown_key",
    "budget_keys",
    "settle_calls",
]


_SETTLE_SHA = hashlib.sha1(SETTLE.encode()).hexdigest()


async def send_settlements(client: RedisClient, calls: list[SettleCall]) -> list[Any]:
    """Each call's reply (an error as its exception), in one pipeline; the script loaded if Redis lacks it."""
    results = await _pipeline(client, calls)
    missing = [index for index, result in enumerate(results) if isinstance(result, NoScriptError)]
    if missing:
        await client.script_load(SETTLE)
        again = await _pipeline(client, [calls[index] for index in missing])
        for index, result in zip(missing, again, strict=True):
            results[index] = result
    return results


async def _pipeline(client: RedisClient, calls: list[SettleCall]) -> list[Any]:
    async with client.pipeline(transaction=False) as pipe:
        for call in calls:
            pipe.evalsha(_SETTLE_SHA, len(call.keys), *call.keys, *call.args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
    return results
