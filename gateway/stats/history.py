"""Thirty minutes of first token and speed per deployment, in one-minute buckets: the dashboard's sparklines.

The rolling window (``gateway.stats.window``) says how each deployment is doing now; this says how it did
over the last half hour, so that a reader sees the provider that degraded ten minutes ago and the ranking
that flipped. One ``DeploymentSummary`` per (model, deployment, minute), holding only outcomes, first
tokens and speeds, kept for ``SPAN_S``.

In memory (``MinuteBuckets``) it is this process's own. With Redis every replica adds its minutes to one
hash per (model, deployment, minute), hash-tagged like the window's slices, expiring after the span
(``RedisHistory``), so every replica's dashboard draws the same lines. These counts are for reading, not
routing: a write whose reply was lost is sent again with the next one, so an outage can count a few
samples twice in a sparkline, never in the window the router reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.samples import Outcome, Sample
from gateway.stats.redis_layout import EXPIRY_SLACK_S, pair_member, summary_fields, summary_from_hash
from gateway.stats.sketch import count_buckets
from gateway.stats.snapshot import DeploymentSummary, Metric, sample_buckets
from gateway.stats.window import PENDING_SAMPLES
from gateway.types import DeploymentKey

if TYPE_CHECKING:
    from gateway.redis_client import RedisClient

BUCKET_S = 60
SPAN_S = 30 * 60
HISTORY_METRICS: frozenset[Metric] = frozenset({"ttft_s", "tokens_per_s"})
_HISTORY_ORDER: tuple[Metric, ...] = ("ttft_s", "tokens_per_s")
SETTLED_AFTER_BUCKETS = 2
"""A minute this many buckets back takes no more writes (a flush lands within seconds): read once, cached."""


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One deployment's minute: ``start`` in unix seconds; None where no sample measured it."""

    start: int
    samples: int
    ttft_p50_s: float | None
    tokens_per_s_p50: float | None


History = dict[DeploymentKey, tuple[HistoryPoint, ...]]
"""Per (model, deployment), its minutes with samples, oldest first, within the last ``SPAN_S``."""


def minute_of(now: float) -> int:
    return int(now // BUCKET_S)


def oldest_minute(now: float) -> int:
    return minute_of(now) - SPAN_S // BUCKET_S + 1


def point(minute: int, summary: DeploymentSummary) -> HistoryPoint:
    return HistoryPoint(
        start=minute * BUCKET_S,
        samples=summary.samples,
        ttft_p50_s=summary.quantile("ttft_s", 0.5),
        tokens_per_s_p50=summary.quantile("tokens_per_s", 0.5),
    )


class MinuteBuckets:
    """Per (model, deployment), one summary per minute. Not thread-safe (one event loop). Usage::

    buckets = MinuteBuckets()
    buckets.add(sample, now=time.time())
    buckets.points(now=time.time())    # {("m", "groq"): (HistoryPoint(...), ...)}

    ``add`` keeps up to ``PENDING_SAMPLES`` samples uncounted and counts them in one pass, in the order they came,
    when that many wait or before anything reads the minutes (``minutes``, ``points``, ``expire``, merges): the
    dashboard reads them now and then, the samples come with every request.
    """

    def __init__(self) -> None:
        self._minutes: dict[DeploymentKey, dict[int, DeploymentSummary]] = {}
        self._pending: list[tuple[DeploymentKey, int, Outcome, Mapping[Metric, int]]] = []
        self._last: tuple[int, DeploymentKey, DeploymentSummary] | None = None
        """The minute, pair and summary last counted in: the next sample is mostly of the same."""

    @property
    def minutes(self) -> dict[DeploymentKey, dict[int, DeploymentSummary]]:
        """Per (model, deployment), its minutes' summaries, every sample counted."""
        self._count_pending()
        return self._minutes

    def __bool__(self) -> bool:
        return bool(self.minutes)

    def add(
        self, sample: Sample, now: float, buckets: Mapping[Metric, int] | None = None, pair: DeploymentKey | None = None
    ) -> None:
        """Count a sample in the minute of ``now``; ``buckets``: its ``sample_buckets``, and ``pair`` its (model,
        deployment), if already worked out."""
        every = sample_buckets(sample) if buckets is None else buckets
        if pair is None:
            pair = (sample.model, sample.deployment)
        pending = self._pending
        pending.append((pair, int(now // BUCKET_S), sample.outcome, every))
        if len(pending) >= PENDING_SAMPLES:
            self._count_pending()

    def _count_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        last = self._last
        for pair, minute, outcome, every in pending:
            if last is not None and last[0] == minute and last[1] == pair:
                summary = last[2]
            else:
                summary = self._summary(pair, minute)
                last = (minute, pair, summary)
            # ``summary.add_buckets(outcome, kept)`` of the two metrics kept, in ``sample_buckets``' order (``ttft_s``
            # before ``tokens_per_s``): no dict of them per sample.
            outcomes = summary.outcomes
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            count_buckets(summary.histograms, every, _HISTORY_ORDER)
        self._last = last

    def add_summary(self, pair: DeploymentKey, minute: int, summary: DeploymentSummary) -> None:
        self._count_pending()
        self._summary(pair, minute).merge(summary)

    def merge(self, other: MinuteBuckets) -> None:
        for pair, minutes in other.minutes.items():
            for minute, summary in minutes.items():
                self.add_summary(pair, minute, summary)

    def expire(self, now: float) -> None:
        self._count_pending()
        self._last = None
        oldest = oldest_minute(now)
        for pair in list(self._minutes):
            minutes = self._minutes[pair]
            for minute in [m for m in minutes if m < oldest]:
                del minutes[minute]
            if not minutes:
                del self._minutes[pair]

    def points(self, now: float, pairs: Iterable[DeploymentKey] | None = None) -> History:
        self.expire(now)
        wanted = self._minutes if pairs is None else {p: self._minutes.get(p, {}) for p in pairs}
        return {
            pair: tuple(point(minute, minutes[minute]) for minute in sorted(minutes))
            for pair, minutes in wanted.items()
        }

    def _summary(self, pair: DeploymentKey, minute: int) -> DeploymentSummary:
        minutes = self._minutes.setdefault(pair, {})
        summary = minutes.get(minute)
        if summary is None:
            summary = minutes[minute] = DeploymentSummary(pair[0], pair[1])
        return summary


def history_key(prefix: str, pair: DeploymentKey, minute: int) -> str:
    """``{gateway:<model>:<deployment>}:m:<minute start>``: the same hash tag as the window's slices."""
    return f"{{{prefix}:{pair_member(pair)}}}:m:{minute * BUCKET_S}"


ADD_MINUTES = """
-- KEYS: minute hashes of one (model, deployment): one hash tag, one slot.
-- ARGV: TTL in seconds, then a JSON array holding, for each key, the array of its fields and increments.
local minutes = cjson.decode(ARGV[2])
for k = 1, #KEYS do
  local fields = minutes[k]
  for j = 1, #fields, 2 do
    redis.call('HINCRBY', KEYS[k], fields[j], fields[j + 1])
  end
  redis.call('EXPIRE', KEYS[k], ARGV[1])
end
return 1
"""
"""What a flush's ``HINCRBY`` per field and ``EXPIRE`` per key did, as one call per (model, deployment): a
command per field cost the client more (packing it, parsing its reply) than all the rest of a flush. The
fields go as one JSON argument (``gateway.stats.redis_writes.ADD_SLICES`` says why)."""


class RedisHistory:
    """The shared half hour: this replica's minutes written to Redis, everyone's read back.

    ``write`` sends what ``pending`` holds in one pipeline (one ``ADD_MINUTES`` per deployment, adding each
    field and renewing each key's TTL); on a Redis error the minutes stay pending for the next flush.
    ``read`` re-reads only the open minutes: settled ones are cached.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.pending = MinuteBuckets()
        self.settled: dict[tuple[DeploymentKey, int], DeploymentSummary | None] = {}

    def add(self, sample: Sample, now: float, buckets: Mapping[Metric, int] | None = None) -> None:
        self.pending.add(sample, now, buckets)

    async def write(self, client: RedisClient, now: float) -> None:
        self.pending.expire(now)
        if not self.pending:
            return
        batch, self.pending = self.pending, MinuteBuckets()
        pipe = client.pipeline(transaction=False)
        ttl = SPAN_S + BUCKET_S + EXPIRY_SLACK_S
        for pair, minutes in batch.minutes.items():
            keys = [history_key(self.prefix, pair, minute) for minute in minutes]
            fields = [[part for field in summary_fields(summary) for part in field] for summary in minutes.values()]
            pipe.eval(ADD_MINUTES, len(keys), *keys, ttl, json.dumps(fields, separators=(",", ":")))
        try:
            await pipe.execute()
        except BaseException:
            batch.merge(self.pending)
            self.pending = batch
            raise

    async def read(self, client: RedisClient, pairs: Iterable[DeploymentKey], now: float) -> History:
        asked = list(dict.fromkeys(pairs))
        oldest, current = oldest_minute(now), minute_of(now)
        settled_until = current - SETTLED_AFTER_BUCKETS
        for key in [k for k in self.settled if k[1] < oldest]:
            del self.settled[key]
        wanted = [
            (pair, minute)
            for pair in asked
            for minute in range(oldest, current + 1)
            if minute > settled_until or (pair, minute) not in self.settled
        ]
        fields: list[Mapping[str, str]] = []
        if wanted:
            pipe = client.pipeline(transaction=False)
            for pair, minute in wanted:
                pipe.hgetall(history_key(self.prefix, pair, minute))
            fields = await pipe.execute()
        merged = MinuteBuckets()
        fresh: dict[tuple[DeploymentKey, int], DeploymentSummary | None] = {}
        for (pair, minute), found in zip(wanted, fields, strict=True):
            fresh[(pair, minute)] = summary = summary_from_hash(pair, found)
            if minute <= settled_until:
                self.settled[(pair, minute)] = summary
        for pair in asked:
            for minute in range(oldest, current + 1):
                key = (pair, minute)
                summary = fresh[key] if key in fresh else self.settled.get(key)
                if summary is not None:
                    merged.add_summary(pair, minute, summary)
        merged.merge(self.pending)  # this replica's minutes not written yet count at once
        return merged.points(now, asked)
