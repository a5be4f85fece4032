"""Reading the shared window back from Redis, re-reading only the slices that may still change.

A writer queues a sample at most ``late_after_s`` after recording it (one flush interval, plus a
refresh that may hold up the flush), and the write lands within ``redis_timeout_s`` of being
queued or fails. A slice whose end is further back than that, plus ``CLOCK_SKEW_S`` for replicas
whose clocks disagree, is *settled*: readers read it once and cache it, and each refresh re-reads
only the open slice (and, for a few seconds after a boundary, the one before it).

A write later than ``late_after_s`` happens only after an outage (samples held while Redis was
unreachable). The writer then replaces the epoch token in the same pipeline, and every reader that
sees a new token drops its cache and reads the whole window once more.

The same pipeline reads each deployment's last answers (``gateway.stats.answers``), whole: the list is
short, and only the entries not read before are decoded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from gateway.config import StatsConfig
from gateway.redis_client import RedisClient
from gateway.stats.answers import Answer, decode
from gateway.stats.redis_layout import (
    answers_key,
    epoch_key,
    pairs_key,
    parse_pair_member,
    slice_key,
    summary_from_hash,
)
from gateway.stats.snapshot import DeploymentSummary
from gateway.stats.window import SlicedWindow, merge_slices, slice_index
from gateway.types import Clock, DeploymentKey

CLOCK_SKEW_S = 2.0
"""How far replicas' wall clocks may disagree before a late write can be missed by a cache."""

READ_SLICES = """
-- KEYS: slice hashes of one (model, deployment): one hash tag, one slot.
-- Returns each one's HGETALL (fields and counts, flat; an empty hash as [] or {}), as one JSON array.
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('HGETALL', key) end
return cjson.encode(out)
"""
"""The open slices' ``HGETALL``s, one call per deployment: redis-py parsing each field and count of a reply
in Python cost the refresh more than everything else it does; one JSON string per deployment is parsed in C."""


def late_after_s(config: StatsConfig) -> float:
    """A sample queued longer than this after its slice ended is late: its write bumps the epoch."""
    return config.flush_interval_s + config.redis_timeout_s


def settle_after_s(config: StatsConfig) -> float:
    """How long after its end readers treat a slice as closed: no write that is not late can land
    later, on a writer clock up to ``CLOCK_SKEW_S`` behind the reader's."""
    return late_after_s(config) + config.redis_timeout_s + CLOCK_SKEW_S


class SharedWindowReader:
    """The window as stored in Redis: cached settled slices plus the last read of the open ones.

    Usage::

        reader = SharedWindowReader(config)
        await reader.read(client)        # a few round trips, off the request path
        totals = reader.window()         # fresh copies, safe to extend
    """

    def __init__(self, config: StatsConfig, wall_clock: Clock) -> None:
        self.config = config
        self.wall_clock = wall_clock
        self.settled = SlicedWindow(config.window_s, config.slice_s, wall_clock)
        self.cached: dict[int, set[DeploymentKey]] = {}
        """Slices read as settled, per index (empty ones included, so they are not read again)."""
        self.open: dict[int, dict[DeploymentKey, DeploymentSummary]] = {}
        self.epoch: str | None = None
        self.hash_reads = 0
        """Slice hashes read so far: what the cache saves is visible in tests and benchmarks."""
        self.answers: dict[DeploymentKey, list[Answer]] = {}
        """Each deployment's answers as last read, oldest first."""
        self._decoded: dict[str, Answer | None] = {}
        """The entries last read, decoded: an entry is decoded once, however many reads find it."""

    async def read(self, client: RedisClient) -> None:
        config = self.config
        now = self.wall_clock()
        horizon = now - config.window_s - config.slice_s - CLOCK_SKEW_S
        pipe = client.pipeline(transaction=False)
        pipe.get(epoch_key(config.key_prefix))
        pipe.zrangebyscore(pairs_key(config.key_prefix), horizon, "+inf")
        epoch, members = await pipe.execute()
        if epoch != self.epoch:
            self.settled.clear()
            self.cached.clear()
            self.epoch = epoch

        current = slice_index(now, config.slice_s)
        oldest = self.settled.oldest_kept()
        last_settled = math.floor((now - settle_after_s(config)) / config.slice_s) - 1
        pairs = [pair for pair in map(parse_pair_member, members) if pair is not None]
        wanted = [
            (index, pair)
            for pair in pairs
            for index in range(oldest, current + 1)
            if index > last_settled or pair not in self.cached.get(index, ())
        ]
        results = await self._read_slices(client, wanted, pairs)

        fresh_open: dict[int, dict[DeploymentKey, DeploymentSummary]] = {}
        for (index, pair), fields in zip(wanted, results, strict=True):
            summary = summary_from_hash(pair, fields)
            if index <= last_settled:
                self.cached.setdefault(index, set()).add(pair)
                if summary is not None:
                    self.settled.add_summary(index, summary)
            elif summary is not None:
                fresh_open.setdefault(index, {})[pair] = summary
        self.open = fresh_open
        for index in [i for i in self.cached if i < oldest]:
            del self.cached[index]

    async def _read_slices(
        self, client: RedisClient, wanted: list[tuple[int, DeploymentKey]], pairs: list[DeploymentKey]
    ) -> list[Mapping[str, str]]:
        """Each wanted slice's fields and counts, in the order asked: one ``READ_SLICES`` per deployment. In the
        same pipeline, each of ``pairs``' answers (kept in ``answers``)."""
        if not wanted and not pairs:
            self.answers = {}
            return []
        config = self.config
        by_pair: dict[DeploymentKey, list[int]] = {}
        for index, pair in wanted:
            by_pair.setdefault(pair, []).append(index)
        pipe = client.pipeline(transaction=False)
        for pair, indexes in by_pair.items():
            keys = [slice_key(config.key_prefix, pair, index, config.slice_s) for index in indexes]
            pipe.eval(READ_SLICES, len(keys), *keys)
        for pair in pairs:
            pipe.lrange(answers_key(config.key_prefix, pair), 0, -1)
        replies = await pipe.execute()
        found: dict[tuple[int, DeploymentKey], Mapping[str, str]] = {}
        for (pair, indexes), reply in zip(by_pair.items(), replies, strict=False):
            for index, flat in zip(indexes, json.loads(reply), strict=True):
                found[(index, pair)] = dict(zip(flat[::2], flat[1::2], strict=True)) if flat else {}
        self._keep_answers(pairs, replies[len(by_pair) :])
        self.hash_reads += len(wanted)
        return [found[item] for item in wanted]

    def _keep_answers(self, pairs: list[DeploymentKey], lists: list[list[str]]) -> None:
        decoded: dict[str, Answer | None] = {}
        answers: dict[DeploymentKey, list[Answer]] = {}
        for pair, raws in zip(pairs, lists, strict=True):
            kept = []
            for raw in raws:
                answer = decoded[raw] = self._decoded[raw] if raw in self._decoded else decode(raw)
                if answer is not None:
                    kept.append(answer)
            if kept:
                answers[pair] = kept
        self._decoded, self.answers = decoded, answers

    def window(self) -> dict[DeploymentKey, DeploymentSummary]:
        """The last read window, aged to now: settled total plus the open slices still in it."""
        self.settled.expire()
        totals = {pair: summary.copy() for pair, summary in self.settled.total.items()}
        merge_slices(totals, self.open, self.settled.oldest_kept())
        return totals


__all__ = ["CLOCK_SKEW_S", "SharedWindowReader", "late_after_s", "settle_after_s"]
