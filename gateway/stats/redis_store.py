"""The shared stats backend: every replica writes its samples to Redis and reads everyone's back.

Nothing here touches Redis while a request waits. ``record`` counts a sample in a local buffer
and in the local view; one background task flushes the buffer (every ``flush_interval_s``, or
sooner when it fills) and refreshes the view from Redis (every ``refresh_interval_s``). The two
are serialised in that task, which is what makes the view exact:

    view = shared window as last read          (everything written before that read began)
         + ``unseen``   written since that read began
         + ``pending``  sealed into a write that Redis may not have yet (being sent, or to resend)
         + ``buffer``   not sealed yet

Each of this replica's samples is in exactly one of the four, so it counts at once and never
twice. If Redis is unreachable, the last read ages out slice by slice while the replica's own
samples keep counting; the buffer is held (bounded by ``buffer_limit`` cells) and flushed when
Redis answers again, after a jittered exponential back-off.

Redis may be one server, a Redis Cluster or a Sentinel-managed master (``gateway.redis_client``).
A flush seals each pair's buffered counts into a numbered write, ``pending`` until Redis has it
(``gateway.stats.redis_writes``): a write whose reply was lost is sent again and applied once, and
when a cluster master fails or a slot moves, only the pairs of the node that did not answer wait.
``buffer_limit`` bounds the buffer and the pending writes together.

Each pair's write carries, besides its counts, the answers recorded since its last write, one by one
(``gateway.stats.answers``), appended to the pair's short list in the same script and so at most once; a
refresh reads the lists back, and the view's log is everyone's answers as read, plus this replica's own
not read back yet. The answers waiting for a write are bounded as the list is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Sequence

from redis.exceptions import RedisError

from gateway.config import StatsConfig
from gateway.redis_client import (
    REDIS_ERRORS,
    Backoff,
    RedisClient,
    RedisConnections,
    after_failure,
    describe_error,
)
from gateway.samples import Sample
from gateway.stats.answers import ANSWERS_KEPT, Answer, AnswerLog, Recorder
from gateway.stats.base import StoreHealth
from gateway.stats.buffer import WriteBuffer
from gateway.stats.history import History, RedisHistory
from gateway.stats.redis_reader import SharedWindowReader, late_after_s
from gateway.stats.redis_writes import IndexDebt, PendingWrites, write_pending
from gateway.stats.snapshot import DeploymentSummary, StatsSnapshot, sample_buckets, validity_key
from gateway.stats.window import slice_index
from gateway.types import Clock, DeploymentKey

logger = logging.getLogger("gateway.stats")

FLUSH_SAMPLES = 1_000
"""A buffer holding this many samples is flushed at once rather than at the next interval."""


_HISTORY_ERRORS: tuple[type[BaseException], ...] = (*REDIS_ERRORS, TimeoutError)


class _RejectedWrites(RedisError):
    """Redis answered some writes with an error (e.g. a key of another type): not retried."""


class RedisStatsStore:
    """Rolling statistics shared by every replica through one Redis. Usage::

    store = RedisStatsStore(StatsConfig(backend="redis", redis_url="redis://127.0.0.1:6379/0"))
    await store.start()          # reads the shared window once (bounded by redis_timeout_s)
    store.record(sample)         # never waits for Redis, never raises
    store.snapshot()             # this replica's samples at once, others' within a refresh
    await store.aclose()         # flushes what it can; closes the client if it opened it

    ``redis`` is the process's ``RedisConnections`` (the store uses its background client and leaves
    closing it to the owner); without one, the store opens its own from the config and the
    process environment. One event loop only. The snapshot shares state with the store between
    refreshes: read it before the next ``record`` (the router reads it within one ``plan``).
    """

    def __init__(
        self,
        config: StatsConfig,
        wall_clock: Clock = time.time,
        redis: RedisConnections | None = None,
    ) -> None:
        self.config = config
        self.wall_clock = wall_clock
        self.reader = SharedWindowReader(config, wall_clock)
        self.buffer = WriteBuffer()
        self.pending = PendingWrites()
        self.writer = uuid.uuid4().hex[:16]
        """This store's name in each pair's writers hash: its writes' numbers are counted per writer. Its answers
        are tagged with it too (``replica``)."""
        self.recorder = Recorder(self.writer)
        self.answers = AnswerLog()
        """The view's answers: everyone's as last read, and this replica's own since."""
        self.unsent: dict[DeploymentKey, deque[Answer]] = {}
        """This replica's answers not sealed into a write yet."""
        self.mine: dict[DeploymentKey, deque[Answer]] = {}
        """This replica's last answers, to keep in the view until a read finds them."""
        self.unseen = WriteBuffer()
        self.view: dict[DeploymentKey, DeploymentSummary] = {}
        self.minutes = RedisHistory(config.key_prefix)
        self.dropped = 0
        self.flushes = 0
        self.redis = redis
        self._owns_redis = redis is None
        self.client: RedisClient | None = None
        self.debt = IndexDebt()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._closing = False
        self.backoff = Backoff.from_config(config, clock=lambda: asyncio.get_running_loop().time())
        self._degraded_reason: str | None = "redis: not contacted yet"

    # -- the request path: no I/O, no await ---------------------------------------------------

    def record(self, sample: Sample) -> None:
        # The sample's buckets (a log per value) and validity worked out once, for the minutes, the buffer
        # and the view alike.
        buckets = sample_buckets(sample)
        validity = validity_key(sample)
        now = self.wall_clock()
        self.minutes.add(sample, now, buckets)
        self._keep_answer(sample, now)
        index = slice_index(now, self.config.slice_s)
        room = self.config.buffer_limit - self.pending.cells
        if not self.buffer.add(index, sample, room, buckets, validity):
            self.dropped += 1
            return
        pair = (sample.model, sample.deployment)
        summary = self.view.get(pair)
        if summary is None:
            summary = self.view[pair] = DeploymentSummary(sample.model, sample.deployment)
        summary.add_buckets(sample.outcome, buckets, validity)
        if self.buffer.samples >= FLUSH_SAMPLES and self._degraded_reason is None:
            self._wake.set()

    def _keep_answer(self, sample: Sample, now: float) -> None:
        answer = self.recorder.answer(sample, now)
        if answer is None:
            return
        pair = (sample.model, sample.deployment)
        self.answers.add(pair, answer)
        for kept in (self.unsent, self.mine):
            answers = kept.get(pair)
            if answers is None:
                answers = kept[pair] = deque(maxlen=ANSWERS_KEPT)
            answers.append(answer)

    @property
    def replica(self) -> str:
        return self.writer

    def snapshot(self) -> StatsSnapshot:
        return StatsSnapshot(self.view, self.wall_clock(), self.answers, self.writer)

    async def history(self, pairs: Sequence[DeploymentKey]) -> History:
        """Every replica's last half hour; with Redis away, this replica's minutes not yet written."""
        now = self.wall_clock()
        if self.client is None or self._degraded_reason is not None:
            return self.minutes.pending.points(now, pairs)
        try:
            return await asyncio.wait_for(self.minutes.read(self.client, pairs, now), self.config.redis_timeout_s)
        except _HISTORY_ERRORS:
            return self.minutes.pending.points(now, pairs)

    def health(self) -> StoreHealth:
        return StoreHealth(
            degraded=self._degraded_reason is not None,
            reason=self._degraded_reason,
            dropped_samples=self.dropped,
            buffered_samples=self.buffer.samples + self.pending.samples,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the pool, read the shared window once, and start the background task.

        If Redis is down this returns after one failed attempt (bounded by ``redis_timeout_s``)
        with the store degraded; it keeps trying in the background.
        """
        if self.redis is None:
            self.redis = RedisConnections(self.config, os.environ)
        self.client = self.redis.background()
        await self.sync()
        self._task = asyncio.create_task(self._run(), name="stats-redis")

    async def sync(self) -> None:
        """Flush and refresh now; on failure the store is left degraded (never raises Redis errors)."""
        await self._exchange(refresh=True)

    async def flush(self) -> None:
        """Write what is buffered now, without refreshing (tests and benchmarks use it)."""
        await self._exchange(refresh=False)

    async def aclose(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        # A pair's new samples wait for its pending write: a few flushes may be needed to write all.
        for _ in range(3):
            if self.client is None or not (self.buffer or self.pending) or self._degraded_reason is not None:
                break
            await self._exchange(refresh=False)
        left = self.buffer.samples + self.pending.samples
        if left:
            logger.warning("stats: %d samples not written to Redis at shutdown", left)
        if self.redis is not None and self._owns_redis:
            await self.redis.aclose()

    # -- the background task ---------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_flush = loop.time() + self.config.flush_interval_s  # start() has just synced
        next_refresh = loop.time() + self.config.refresh_interval_s
        while not self._closing:
            now = loop.time()
            backing_off = not self.backoff.ready()
            due = min(self.backoff.retry_at, next_refresh) if backing_off else min(next_flush, next_refresh)
            if due > now:
                try:
                    await asyncio.wait_for(self._wake.wait(), due - now)
                except TimeoutError:
                    pass
            self._wake.clear()
            if self._closing:
                return
            now = loop.time()
            refresh = now >= next_refresh
            if refresh:
                next_refresh = now + self.config.refresh_interval_s
            if not self.backoff.ready():
                if refresh:
                    self._rebuild_view()  # age the last read out while Redis is away
                continue
            try:
                await self._exchange(refresh=refresh)
            except Exception as exc:
                # The task's outermost handler: a bug here (or in the client library) must not
                # freeze the stats for good.
                logger.exception("stats: unexpected error talking to redis")
                self._failed(exc)
                if self.client is not None:
                    await after_failure(self.client)
            next_flush = loop.time() + self.config.flush_interval_s

    async def _exchange(self, *, refresh: bool) -> bool:
        # One exchange at a time: a refresh must never overlap a flush of this replica, or a
        # batch could be half in the read and still counted as unseen.
        async with self._lock:
            return await self._exchange_locked(refresh=refresh)

    async def _exchange_locked(self, *, refresh: bool) -> bool:
        # A flush with nothing to write makes no round trip: while degraded, read too, or it would be taken for
        # Redis being back (and an idle gateway would flip between degraded and healthy all through an outage).
        refresh = refresh or self._degraded_reason is not None
        try:
            await self._flush()
            assert self.client is not None
            await self.minutes.write(self.client, self.wall_clock())
            if refresh:
                assert self.client is not None
                await self.reader.read(self.client)
                self.unseen = WriteBuffer()  # everything written before the read is in it now
        except REDIS_ERRORS as exc:
            self._failed(exc)
            self._rebuild_view()
            assert self.client is not None
            await after_failure(self.client)
            return False
        if refresh:
            self._rebuild_view()
        self._succeeded()
        return True

    async def _flush(self) -> None:
        assert self.client is not None
        oldest = self.reader.settled.oldest_kept()
        batch, self.buffer = self.buffer, WriteBuffer()
        self.dropped += batch.expire(oldest) + self.pending.expire(oldest)
        config = self.config
        now = self.wall_clock()
        late_before = (now - late_after_s(config)) / config.slice_s - 1
        self.debt.epoch = self.debt.epoch or any(index <= late_before for index in batch.slices)
        self.buffer = self.pending.seal(batch, self.unsent)  # nothing can arrive meanwhile: no await in between
        if not self.pending and not self.debt:
            return
        sent = dict(self.pending.writes)
        outcome = await write_pending(self.client, config, self.writer, self.pending, self.debt, now)
        for pair in outcome.done:
            counts = self.pending.done(pair, sent[pair])
            if counts is not None:
                self.unseen.absorb(counts)
        self.flushes += 1
        if outcome.refused:
            # Retrying could not help (and would add what did go in twice): those writes count as done.
            raise _RejectedWrites(f"{len(outcome.refused)} writes rejected: {outcome.refused[0]}")
        if outcome.error is not None:
            raise outcome.error

    def _rebuild_view(self) -> None:
        view = self.reader.window()
        oldest = self.reader.settled.oldest_kept()
        self.dropped += self.buffer.expire(oldest) + self.pending.expire(oldest)
        self.unseen.expire(oldest)
        for part in (self.unseen, self.pending, self.buffer):
            part.merge_into(view, oldest)
        self.view = view
        self._rebuild_answers()

    def _rebuild_answers(self) -> None:
        """The view's answers: everyone's as last read, with this replica's own that the read did not find (not
        written yet, or written after it), in the order they were recorded."""
        read = self.reader.answers
        for pair in read.keys() | self.mine.keys() | self.answers.recent.keys():
            answers = read.get(pair, [])
            found = {a.seq for a in answers if a.replica == self.writer}
            missing = [a for a in self.mine.get(pair, ()) if a.seq not in found]
            self.answers.replace(pair, sorted([*answers, *missing], key=_recorded_at))

    # -- health and back-off ---------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        self.backoff.failed()
        reason = f"redis at {self.config.redis_target}: {type(exc).__name__}: {describe_error(exc)}"
        if self.backoff.failures == 1:
            logger.warning("stats: %s; serving local samples, retrying with back-off", reason)
        self._degraded_reason = reason

    def _succeeded(self) -> None:
        failures = self.backoff.succeeded()
        if failures:
            logger.info("stats: redis reachable again after %d failed attempts", failures)
        self._degraded_reason = None


def _recorded_at(answer: Answer) -> float:
    return answer.at


async def read_shared_snapshot(
    config: StatsConfig, wall_clock: Clock = time.time, redis: RedisConnections | None = None
) -> StatsSnapshot:
    """One read of the shared window, nothing buffered or written (``gateway stats --redis``).

    Raises one of ``REDIS_ERRORS`` if Redis cannot be read (and ``ConfigError`` if a credential's
    variable is unset, when it opens its own connections).
    """
    connections = redis or RedisConnections(dataclasses.replace(config, backend="redis"), os.environ)
    try:
        reader = SharedWindowReader(config, wall_clock)
        await reader.read(connections.background())
        return StatsSnapshot(reader.window(), taken_at=wall_clock())
    finally:
        if redis is None:
            await connections.aclose()
