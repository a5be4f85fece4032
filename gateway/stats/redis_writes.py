"""Writing a batch of samples to Redis: one script per (model, deployment), so each either ran or did not.

Every slice key of one (model, deployment) carries the same hash tag, so all of them live in one
slot, on one node of a cluster. One ``EVAL`` of ``ADD_SLICES`` adds a pair's counts to all its slices
and renews their TTL, atomically. One pipeline carries every pair's script, then the pair index and
the epoch (keys of their own slots): a cluster client splits it per node, follows ``MOVED``/``ASK``,
and reports each command's result on its own.

So each pair's outcome is known on its own:

- ran: its counts are in Redis (the store moves them to ``unseen``);
- did not run (connection lost, a master failing over, a slot moving, a demoted master's ``READONLY``):
  its counts go back to the buffer and are written after the store's back-off. The one ambiguous case
  is a reply lost after Redis ran the script: the pair is then counted twice, never lost;
- refused (e.g. a key of another type under the prefix): counted as written and reported, since a
  retry cannot succeed and could add what did go in twice.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TypeAlias

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import StatsConfig
from gateway.redis_client import RedisClient
from gateway.stats.buffer import WriteBuffer
from gateway.stats.redis_layout import (
    EPOCH_TTL_S,
    Pair,
    epoch_key,
    pair_member,
    pairs_key,
    slice_key,
    slice_ttl_s,
    summary_fields,
)

AnyPipeline: TypeAlias = "Pipeline | ClusterPipeline"

ADD_SLICES = """
-- KEYS: the slice hashes of one (model, deployment): one hash tag, so one slot.
-- ARGV: the TTL in seconds, then for each key the number n of its fields, then n field/increment pairs.
local ttl = ARGV[1]
local at = 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[at])
  for j = 1, n do
    redis.call('HINCRBY', KEYS[k], ARGV[at + 2 * j - 1], ARGV[at + 2 * j])
  end
  redis.call('EXPIRE', KEYS[k], ttl)
  at = at + 1 + 2 * n
end
return #KEYS
"""

_NOT_RUN = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    ClusterDownError,
    ClusterError,
    TryAgainError,
    AskError,  # MovedError too: still redirected after the client followed the redirections it may
    ReadOnlyError,
    BusyLoadingError,
    RedisClusterException,
)
"""Errors that mean Redis did not run the command (or may not have): write it again later."""


def did_not_run(result: object) -> bool:
    if isinstance(result, _NOT_RUN):
        return True
    # A write refused for memory runs nothing; it may succeed once memory is freed.
    return isinstance(result, ResponseError) and str(result).startswith("OOM")


@dataclass(slots=True)
class WriteOutcome:
    """What one pipeline achieved, pair by pair."""

    not_run: set[Pair] = field(default_factory=set)
    """Pairs whose script did not run: their counts are still to be written."""
    refused: list[ResponseError] = field(default_factory=list)
    index_written: bool = True
    """False if the pair index or the epoch was not updated: the next flush does it again."""
    error: BaseException | None = None
    """The first error that kept something from being written (for the store's health and back-off)."""


class IndexDebt:
    """Index updates a failed flush still owes: members of ``pairs`` and a new epoch token.

    Without them a pair written during an outage could stay invisible to readers (no member), or a
    late slice stay cached by them unread (no new epoch).
    """

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.epoch = False

    def __bool__(self) -> bool:
        return bool(self.members) or self.epoch


def queue_writes(
    pipe: AnyPipeline, config: StatsConfig, batch: WriteBuffer, debt: IndexDebt, now: float, late: bool
) -> list[Pair]:
    """Queue ``batch``'s scripts and the index updates on ``pipe``; returns the pairs in script order."""
    ttl = slice_ttl_s(config.window_s, config.slice_s)
    per_pair: dict[Pair, list[tuple[str, list[str | int]]]] = {}
    for index, summaries in batch.slices.items():
        for pair, summary in summaries.items():
            fields: list[str | int] = []
            for name, n in summary_fields(summary):
                fields += (name, n)
            per_pair.setdefault(pair, []).append((slice_key(config.key_prefix, pair, index, config.slice_s), fields))
    order = list(per_pair)
    for pair in order:
        slices = per_pair[pair]
        args: list[str | int] = [ttl]
        for _, fields in slices:
            args += [len(fields) // 2, *fields]
        pipe.eval(ADD_SLICES, len(slices), *(key for key, _ in slices), *args)
    debt.members.update(pair_member(pair) for pair in order)
    debt.epoch = debt.epoch or late
    if debt.members:
        index_key = pairs_key(config.key_prefix)
        pipe.zadd(index_key, dict.fromkeys(debt.members, now))
        pipe.expire(index_key, ttl)
        pipe.zremrangebyscore(index_key, "-inf", now - ttl)
    if debt.epoch:
        # Some of these slices may be cached as closed by readers: make them read again.
        pipe.set(epoch_key(config.key_prefix), uuid.uuid4().hex, ex=EPOCH_TTL_S)
    return order


async def write_batch(
    client: RedisClient, config: StatsConfig, batch: WriteBuffer, debt: IndexDebt, now: float, late: bool
) -> WriteOutcome:
    """Send ``batch`` (and what ``debt`` owes) in one pipeline; raises only if nothing is known to have run.

    ``debt`` is settled when the index updates ran, and kept (with this batch's members added) when not.
    """
    pipe = client.pipeline(transaction=False)
    order = queue_writes(pipe, config, batch, debt, now, late)
    results = await pipe.execute(raise_on_error=False)
    outcome = WriteOutcome()
    for pair, result in zip(order, results, strict=False):
        if did_not_run(result):
            outcome.not_run.add(pair)
            outcome.error = outcome.error or result
        elif isinstance(result, ResponseError):
            outcome.refused.append(result)
    index_results = results[len(order) :]
    failed_index = [r for r in index_results if isinstance(r, BaseException)]
    if failed_index:
        outcome.index_written = False
        outcome.error = outcome.error or failed_index[0]
    else:
        debt.members.clear()
        debt.epoch = False
    return outcome


__all__ = ["ADD_SLICES", "IndexDebt", "WriteOutcome", "did_not_run", "queue_writes", "write_batch"]
