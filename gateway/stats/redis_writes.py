"""Writing samples to Redis exactly once: one sealed, numbered script per (model, deployment).

Every slice key of one (model, deployment), and its writers hash, carry the same hash tag, so all of
them live in one slot, on one node of a cluster. A flush *seals* what each pair has buffered into a
``SealedWrite`` numbered by this writer (one counter per store), and sends it as one ``EVAL`` of
``ADD_SLICES``: the script adds the counts to every slice, renews their TTL, and records the number
in the pair's writers hash, atomically, unless that hash says the number was applied already.

So a write whose reply was lost (a connection cut, a master killed mid-flush) is simply sent again,
with the same number, until a reply comes: applied once, never twice. A pair has at most one write
pending; what it buffers meanwhile waits for the next seal, so numbers reach a slot in order.

One pipeline per node carries that node's scripts, and the pair index and epoch where they live; the
nodes are written in parallel and each pair's outcome is read on its own (a cluster client follows
``MOVED``/``ASK`` for each command). With ``redis_wait_replicas = n`` each node's pipeline ends with
``INFO replication`` and ``WAIT n``: a write counts as done only once n of the node's replicas have it (all it has,
if fewer, unless it just lost one: ``gateway.stats.redis_replicas``), so a failover that promotes one
of them cannot lose it; until then it stays pending, and sending it again costs Redis one ``HGET``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import StatsConfig
from gateway.redis_client import RedisClient
from gateway.stats.answers import ANSWERS_KEPT, Answer, encode
from gateway.stats.buffer import WriteBuffer
from gateway.stats.redis_layout import (
    EPOCH_TTL_S,
    answers_key,
    epoch_key,
    pair_member,
    pairs_key,
    slice_key,
    slice_ttl_s,
    summary_fields,
    writers_key,
)
from gateway.stats.redis_replicas import ReplicaMemory
from gateway.stats.snapshot import DeploymentSummary
from gateway.types import DeploymentKey

AnyPipeline: TypeAlias = "Pipeline | ClusterPipeline"

ADD_SLICES = """
-- KEYS[1]: the writers hash of one (model, deployment); KEYS[2]: its answers list; KEYS[3..]: its slice hashes.
-- One hash tag, one slot. ARGV: writer id, sequence number, TTL in seconds, then a JSON array holding, for each
-- slice key, the array of its fields and increments: ["outcome:ok", 12, "ttft_s:-120", 3, ...]; then a JSON
-- array of the answers to append (each a string), and how many answers the list keeps.
local seq = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if seq <= last then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local slices = cjson.decode(ARGV[4])
for k = 3, #KEYS do
  local fields = slices[k - 2]
  for j = 1, #fields, 2 do
    redis.call('HINCRBY', KEYS[k], fields[j], fields[j + 1])
  end
  redis.call('EXPIRE', KEYS[k], ARGV[3])
end
local answers = cjson.decode(ARGV[5])
if #answers > 0 then
  for _, answer in ipairs(answers) do redis.call('RPUSH', KEYS[2], answer) end
  redis.call('LTRIM', KEYS[2], -tonumber(ARGV[6]), -1)
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""
"""Returns 1 when it added the counts (and appended the answers), 0 when this write had been applied before (its
reply was lost): a resent write appends its answers once.

The fields come as one JSON argument, not two arguments each: redis-py packs every argument of a command
in Python, and a flush's hundreds of fields made that most of its CPU; ``json.dumps`` packs them in C."""

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
"""Errors after which the write may not have run: it is sent again (applied at most once)."""


def did_not_run(result: object) -> bool:
    if isinstance(result, _NOT_RUN):
        return True
    # A write refused for memory (or for a failed snapshot, MISCONF) runs nothing: a script is refused at its
    # first write, and once one went in the rest may follow. It may succeed once memory is freed. redis-py
    # raises OOM as ``OutOfMemoryError`` with the code cut off its message.
    return isinstance(result, OutOfMemoryError) or (
        isinstance(result, ResponseError) and str(result).startswith(("OOM", "MISCONF"))
    )


@dataclass(slots=True)
class SealedWrite:
    """One pair's counts, and its answers one by one, under one sequence number: sent as they are until Redis has
    them."""

    seq: int
    counts: WriteBuffer
    answers: tuple[Answer, ...] = ()


class PendingWrites:
    """Per pair, the one sealed write on its way to Redis. Not thread-safe (one event loop)."""

    def __init__(self) -> None:
        self.writes: dict[DeploymentKey, SealedWrite] = {}
        self._seq = itertools.count(1)
        self.replicas = ReplicaMemory()
        """Each node's replicas at its last confirmed write (``redis_wait_replicas``)."""

    def __bool__(self) -> bool:
        return bool(self.writes)

    @property
    def samples(self) -> int:
        return sum(write.counts.samples for write in self.writes.values())

    @property
    def cells(self) -> int:
        return sum(write.counts.cells for write in self.writes.values())

    def seal(self, batch: WriteBuffer, answers: dict[DeploymentKey, deque[Answer]] | None = None) -> WriteBuffer:
        """Seal each pair of ``batch`` (or of ``answers``) that has no write pending, with its answers (taken out
        of ``answers``); returns the counts of the others, which wait for their pair's pending write to be done
        (and their answers stay in ``answers``)."""
        answers = answers if answers is not None else {}
        waiting = batch.take(self.writes.keys())
        for pair in batch.pairs() | (answers.keys() - self.writes.keys()):
            heard = tuple(answers.pop(pair, ()))
            self.writes[pair] = SealedWrite(next(self._seq), batch.take((pair,)), heard)
        return waiting

    def done(self, pair: DeploymentKey, write: SealedWrite) -> WriteBuffer | None:
        """``write`` reached Redis: its counts, unless it had been dropped meanwhile (``expire``)."""
        if self.writes.get(pair) is not write:
            return None
        del self.writes[pair]
        return write.counts

    def expire(self, oldest: int) -> int:
        """Drop slices older than ``oldest``; returns how many samples went with them."""
        dropped = 0
        for pair in list(self.writes):
            counts = self.writes[pair].counts
            dropped += counts.expire(oldest)
            if not counts:
                del self.writes[pair]
        return dropped

    def merge_into(self, totals: dict[DeploymentKey, DeploymentSummary], oldest: int) -> None:
        for write in self.writes.values():
            write.counts.merge_into(totals, oldest)


@dataclass(slots=True)
class WriteOutcome:
    """What one flush achieved, pair by pair."""

    done: set[DeploymentKey] = field(default_factory=set)
    """Pairs whose write Redis has (applied now or before): no longer pending."""
    refused: list[ResponseError] = field(default_factory=list)
    """Errors Redis would repeat (e.g. a key of another type): those writes count as done."""
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


@dataclass(slots=True)
class _Unit:
    """Commands that live in one slot and succeed or fail together: a pair's write, or an index update."""

    key: str
    """A key of the unit (all of its keys share its slot)."""
    write: tuple[DeploymentKey, SealedWrite] | None
    """The write it carries; None for an index update."""
    queue: Callable[[AnyPipeline], None]
    commands: int


def _script_args(
    config: StatsConfig, writer: str, pair: DeploymentKey, write: SealedWrite
) -> tuple[list[str], list[str | int]]:
    ttl = slice_ttl_s(config.window_s, config.slice_s)
    keys = [writers_key(config.key_prefix, pair), answers_key(config.key_prefix, pair)]
    slices: list[list[str | int]] = []
    for index, summaries in sorted(write.counts.slices.items()):
        summary = summaries.get(pair)
        if summary is None:
            continue
        keys.append(slice_key(config.key_prefix, pair, index, config.slice_s))
        slices.append([part for field in summary_fields(summary) for part in field])
    answers = json.dumps([encode(answer) for answer in write.answers], separators=(",", ":"))
    return keys, [writer, write.seq, ttl, json.dumps(slices, separators=(",", ":")), answers, ANSWERS_KEPT]


def _units(config: StatsConfig, writer: str, pending: PendingWrites, debt: IndexDebt, now: float) -> list[_Unit]:
    units = []
    for pair, write in pending.writes.items():
        keys, args = _script_args(config, writer, pair, write)

        def script(pipe: AnyPipeline, keys: list[str] = keys, args: list[str | int] = args) -> None:
            pipe.eval(ADD_SLICES, len(keys), *keys, *args)

        units.append(_Unit(keys[0], (pair, write), script, 1))
    debt.members.update(pair_member(pair) for pair in pending.writes)
    ttl = slice_ttl_s(config.window_s, config.slice_s)
    if debt.members:
        index_key = pairs_key(config.key_prefix)
        members = dict.fromkeys(debt.members, now)

        def update_index(pipe: AnyPipeline) -> None:
            pipe.zadd(index_key, members)
            pipe.expire(index_key, ttl)
            pipe.zremrangebyscore(index_key, "-inf", now - ttl)

        units.append(_Unit(index_key, None, update_index, 3))
    if debt.epoch:
        key = epoch_key(config.key_prefix)

        def epoch(pipe: AnyPipeline) -> None:
            # Some of these slices may be cached as closed by readers: make them read again.
            pipe.set(key, uuid.uuid4().hex, ex=EPOCH_TTL_S)

        units.append(_Unit(key, None, epoch, 1))
    return units


_Group = tuple[ClusterNode | None, list[_Unit]]


async def _by_node(client: RedisClient, units: list[_Unit]) -> tuple[list[_Group], list[_Unit]]:
    """Units grouped by the node that holds them (one group outside a cluster), and those whose slot
    no node serves right now."""
    if not isinstance(client, RedisCluster):
        return [(None, units)], []
    await client.initialize()  # no-op unless a failure asked for the topology to be read again
    groups: dict[str, _Group] = {}
    uncovered = []
    for unit in units:
        try:
            node = client.get_node_from_key(unit.key)
        except SlotNotCoveredError:
            uncovered.append(unit)
            continue
        if node is None:
            uncovered.append(unit)
            continue
        groups.setdefault(node.name, (node, []))[1].append(unit)
    return list(groups.values()), uncovered


async def _send(client: RedisClient, group: _Group, wait_replicas: int, wait_ms: int) -> list[object]:
    node, units = group
    pipe = client.pipeline(transaction=False)
    for unit in units:
        unit.queue(pipe)
    if wait_replicas and any(unit.write is not None for unit in units):
        # The replicas connected now and the replication id: WAIT for as many as asked (gateway.stats.redis_replicas).
        target = {"target_nodes": node} if node is not None else {}
        pipe.execute_command("INFO", "replication", **target)
        pipe.execute_command("WAIT", wait_replicas, wait_ms, **target)
    results: list[object] = await pipe.execute(raise_on_error=False)
    return results


def _errors(results: list[object]) -> Iterator[BaseException]:
    return (r for r in results if isinstance(r, BaseException))


async def write_pending(
    client: RedisClient, config: StatsConfig, writer: str, pending: PendingWrites, debt: IndexDebt, now: float
) -> WriteOutcome:
    """Send every pending write (and what ``debt`` owes): one pipeline per node, the nodes in parallel.

    Never raises for a node that failed: its writes stay pending, while the other nodes' are done.
    ``debt`` is settled for the index updates that ran.
    """
    units = _units(config, writer, pending, debt, now)
    outcome = WriteOutcome()
    groups, uncovered = await _by_node(client, units)
    wait_ms = max(1, int(config.redis_timeout_s * 500))  # half the call's timeout: the reply must still come
    replies = await asyncio.gather(
        *(_send(client, group, config.redis_wait_replicas, wait_ms) for group in groups), return_exceptions=True
    )
    failed: list[tuple[_Unit, BaseException]] = [(u, SlotNotCoveredError(f"no node serves {u.key}")) for u in uncovered]
    for (node, group), reply in zip(groups, replies, strict=True):
        if isinstance(reply, BaseException):
            if not isinstance(reply, Exception):
                raise reply  # cancelled: nothing is known, everything stays pending
            failed += [(unit, reply) for unit in group]  # the node's pipeline was not sent
            continue
        confirmed = None
        if config.redis_wait_replicas and any(unit.write is not None for unit in group):
            name = node.name if node is not None else ""
            confirmed = pending.replicas.confirmed(name, reply[-2], reply[-1], config.redis_wait_replicas)
        at = 0
        for unit in group:
            results, at = reply[at : at + unit.commands], at + unit.commands
            error = next(_errors(results), None)
            if error is not None and not (isinstance(error, ResponseError) and not did_not_run(error)):
                failed.append((unit, error))
            elif unit.write is not None and confirmed is not None and error is None:
                failed.append((unit, confirmed))
            else:
                if isinstance(error, ResponseError):
                    outcome.refused.append(error)
                if unit.write is not None:
                    outcome.done.add(unit.write[0])
    if failed:
        outcome.error = failed[0][1]
    unsettled = {unit.key for unit, _ in failed if unit.write is None}
    if pairs_key(config.key_prefix) not in unsettled:
        debt.members.clear()
    if epoch_key(config.key_prefix) not in unsettled:
        debt.epoch = False
    return outcome


__all__ = ["ADD_SLICES", "IndexDebt", "PendingWrites", "SealedWrite", "WriteOutcome", "did_not_run", "write_pending"]
