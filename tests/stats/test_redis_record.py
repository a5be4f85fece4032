"""The Redis store's ``record``, history write and refresh count and read exactly what they did before they were
made cheaper: ``record`` works a sample's buckets out once for the minutes, the buffer and the view (it used to,
three times over), a flush writes the minutes as one ``ADD_MINUTES`` per deployment (it used to send an
``HINCRBY`` per field and an ``EXPIRE`` per key), its slices' counts go to ``ADD_SLICES`` as one JSON argument
(they went as two arguments per field), and a refresh reads the slices as one ``READ_SLICES`` per
deployment (it used to send an ``HGETALL`` per slice). Each is checked against the former code, copied here."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
import redis
import redis.asyncio

from gateway.config import StatsConfig
from gateway.redis_client import RedisClient
from gateway.samples import Sample
from gateway.stats import RedisStatsStore
from gateway.stats.buffer import WriteBuffer
from gateway.stats.history import BUCKET_S, SPAN_S, MinuteBuckets, RedisHistory, history_key
from gateway.stats.redis_layout import EXPIRY_SLACK_S, slice_key, slice_ttl_s, summary_fields, writers_key
from gateway.stats.redis_reader import SharedWindowReader
from gateway.stats.redis_writes import IndexDebt, PendingWrites, write_pending
from gateway.stats.sketch import bucket_of
from gateway.stats.snapshot import METRICS, DeploymentSummary, sample_values, validity_key
from gateway.stats.window import slice_index
from tests.redis_server import RedisServer
from tests.support.clock import FakeClock

pytestmark = pytest.mark.anyio


def _samples(count: int, seed: int = 7) -> list[Sample]:
    """Varied samples: four deployments, failures, missing values, judged answers, cached and long prompts."""
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        ok = rng.random() < 0.85
        cached = rng.choice([None, 0, rng.randint(0, 3000)])
        samples.append(
            Sample(
                model=rng.choice(["m1", "m2"]),
                deployment=rng.choice(["a", "b:c"]),
                provider="p",
                endpoint="chat",
                stream=True,
                outcome="ok" if ok else rng.choice(["timeout", "upstream_error", "client_cancelled"]),
                started_at=0.0,
                ttft_s=rng.choice([None, 0.0, rng.lognormvariate(-1.5, 0.8)]),
                first_answer_s=rng.choice([None, rng.lognormvariate(-1.2, 0.8)]),
                tokens_per_s=rng.lognormvariate(4.0, 0.6) if ok else None,
                e2e_s=rng.lognormvariate(1.0, 0.7),
                output_tokens=rng.randint(0, 900) if ok else None,
                usage_prompt_tokens=rng.choice([None, rng.randint(10, 5000)]),
                usage_cached_tokens=cached,
                prompt_tokens_estimate=rng.randint(10, 6000),
                kind=rng.choice([None, "tools", "json", "plain"]),
                validity=rng.choice([None, "valid", "empty"]),
            )
        )
    return samples


def _old_add(buffer: WriteBuffer, index: int, sample: Sample, room: int) -> bool:
    """``WriteBuffer.add`` as it was: its values and validity worked out from the sample, then counted again."""
    pair = (sample.model, sample.deployment)
    summaries = buffer.slices.setdefault(index, {})
    summary = summaries.get(pair)
    values = sample_values(sample)
    validity = validity_key(sample)
    if summary is None:
        new = 1 + len(values) + (validity is not None)
    else:
        new = 0 if sample.outcome in summary.outcomes else 1
        new += validity is not None and validity not in summary.validity
        for metric, value in values.items():
            histogram = summary.histograms.get(metric)
            if histogram is None or bucket_of(value) not in histogram.counts:
                new += 1
    if buffer.cells + new > room:
        if not summaries:
            del buffer.slices[index]
        return False
    if summary is None:
        summary = summaries[pair] = DeploymentSummary(sample.model, sample.deployment)
    summary.add(sample)
    buffer.samples += 1
    buffer.cells += new
    return True


def test_record_counts_what_it_counted_before() -> None:
    """Buffer (cells and refusals included: a small ``buffer_limit``), view and minutes, sample by sample."""
    clock = FakeClock(1_800_000_000.0)
    config = StatsConfig(backend="redis", redis_url="redis://127.0.0.1:1/0", buffer_limit=600)
    store = RedisStatsStore(config, clock)  # not started: recording needs no Redis
    buffer, view, minutes, dropped = WriteBuffer(), dict[tuple[str, str], DeploymentSummary](), MinuteBuckets(), 0
    for number, sample in enumerate(_samples(3000)):
        clock.advance(0.37 if number % 50 else 11.0)  # several slices and minutes
        store.record(sample)
        minutes.add(sample, clock())
        if _old_add(buffer, slice_index(clock(), config.slice_s), sample, config.buffer_limit):
            view.setdefault((sample.model, sample.deployment), DeploymentSummary(sample.model, sample.deployment))
            view[(sample.model, sample.deployment)].add(sample)
        else:
            dropped += 1
    assert dropped > 0, "the buffer's bound was reached"
    assert (store.dropped, store.buffer.samples, store.buffer.cells) == (dropped, buffer.samples, buffer.cells)
    assert store.buffer.slices == buffer.slices
    assert store.view == view
    assert store.minutes.pending.minutes == minutes.minutes


def _old_history_write(client: redis.Redis, prefix: str, batch: MinuteBuckets) -> None:
    """``RedisHistory.write`` as it was: an ``HINCRBY`` per field and an ``EXPIRE`` per key, pipelined."""
    pipe = client.pipeline(transaction=False)
    for pair, minutes in batch.minutes.items():
        for minute, summary in minutes.items():
            key = history_key(prefix, pair, minute)
            for name, n in summary_fields(summary):
                pipe.hincrby(key, name, n)
            pipe.expire(key, SPAN_S + BUCKET_S + EXPIRY_SLACK_S)
    pipe.execute()


def _same_on_both_sides(sync: redis.Redis, prefix: str) -> dict[str, dict[bytes | str, bytes | str]]:
    """The hashes the new code wrote under ``{prefix}-new`` and the old under ``{prefix}-old``: the same keys, fields
    and counts, and TTLs within two seconds of each other. The new side's, by key with the prefix as ``P``."""
    found, ttls = {}, {}
    for side in ("new", "old"):
        keys = sorted(sync.scan_iter(match=f"{{{prefix}-{side}:*", count=1000))
        found[side] = {key.replace(f"{prefix}-{side}", "P"): sync.hgetall(key) for key in keys}
        ttls[side] = {key.replace(f"{prefix}-{side}", "P"): sync.ttl(key) for key in keys}
    assert found["new"] == found["old"]
    assert ttls["new"].keys() == ttls["old"].keys()
    assert all(abs(ttls["new"][key] - ttls["old"][key]) <= 2 for key in ttls["new"])
    return found["new"]


async def test_history_written_as_hincrby_per_field_wrote_it(redis_server: RedisServer, prefix: str) -> None:
    """Two flushes of four deployments over several minutes: the same hashes, fields, counts and TTLs."""
    sync = redis_server.client()
    client = redis.asyncio.Redis(port=redis_server.port, decode_responses=True)
    history = RedisHistory(f"{prefix}-new")
    now = 1_800_000_000.0
    try:
        for flush in range(2):
            batch = MinuteBuckets()
            for number, sample in enumerate(_samples(400, seed=11 + flush)):
                at = now + number * 0.5  # 200 s: four minutes
                history.add(sample, at)
                batch.add(sample, at)
            await history.write(client, now + 200)
            _old_history_write(sync, f"{prefix}-old", batch)
        assert not history.pending
        found = _same_on_both_sides(sync, prefix)
        assert len(found) >= 4 * 4, sorted(found)  # four deployments, four minutes or more
    finally:
        await client.aclose()
        sync.close()


class _OldReader(SharedWindowReader):
    """The reader as it was: an ``HGETALL`` per wanted slice, pipelined (no answers read: ``pairs`` unused)."""

    async def _read_slices(
        self, client: RedisClient, wanted: list[tuple[int, tuple[str, str]]], pairs: list[tuple[str, str]]
    ) -> list[Mapping[str, str]]:
        if not wanted:
            return []
        pipe = client.pipeline(transaction=False)
        for index, pair in wanted:
            pipe.hgetall(slice_key(self.config.key_prefix, pair, index, self.config.slice_s))
        results: list[Mapping[str, str]] = await pipe.execute()
        self.hash_reads += len(wanted)
        return results


def _readings(summaries: Mapping[tuple[str, str], DeploymentSummary]) -> dict[tuple[str, str], tuple[object, ...]]:
    """What the router reads of each summary: its counts, and each metric's mean and quantiles (float sums too)."""
    return {
        pair: (
            summary,
            *((s.mean(), s.quantile(0.5), s.quantile(0.95)) for s in summary.histograms.values()),
            tuple(m for m in METRICS if m in summary.histograms),
        )
        for pair, summary in summaries.items()
    }


async def test_refresh_reads_what_hgetall_per_slice_read(redis_server: RedisServer, prefix: str) -> None:
    """Four deployments written over two minutes of 10 s slices (some settled, some open, some empty), read twice
    (the second from the cache of settled slices): the same window, settled slices, open slices and reads."""
    clock = FakeClock(1_800_000_000.0)
    config = StatsConfig(
        backend="redis", redis_url=redis_server.url, key_prefix=prefix, window_s=60, slice_s=10, redis_timeout_s=0.5
    )
    writer = RedisStatsStore(config, clock)
    await writer.start()
    client = redis.asyncio.Redis(port=redis_server.port, decode_responses=True)
    try:
        samples = _samples(1200, seed=21)
        for number, sample in enumerate(samples):
            if (number // 100) % 4 != 3 or sample.deployment == "a":  # some slices of some deployments stay empty
                writer.record(sample)
            clock.advance(0.1)
            if number % 100 == 99:
                await writer.flush()
        new, old = SharedWindowReader(config, clock), _OldReader(config, clock)
        seen_open = seen_cached = False
        for _ in range(2):
            for reader in (new, old):
                await reader.read(client)
            assert _readings(new.window()) == _readings(old.window())
            assert new.open == old.open and new.cached == old.cached and new.hash_reads == old.hash_reads
            assert _readings(new.settled.total) == _readings(old.settled.total)
            seen_open, seen_cached = seen_open or bool(new.open), seen_cached or bool(new.cached)
            clock.advance(15)
        assert seen_open and seen_cached, "both open and settled slices were read"
    finally:
        await client.aclose()
        await writer.aclose()


_OLD_ADD_SLICES = """
local seq = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if seq <= last then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local at = 4
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  for j = 1, n do
    redis.call('HINCRBY', KEYS[k], ARGV[at + 2 * j - 1], ARGV[at + 2 * j])
  end
  redis.call('EXPIRE', KEYS[k], ARGV[3])
  at = at + 1 + 2 * n
end
return 1
"""
"""``ADD_SLICES`` as it was, its counts as a count of fields then two arguments per field."""


def _old_write_pending(client: redis.Redis, config: StatsConfig, writer: str, pending: PendingWrites) -> None:
    for pair, write in pending.writes.items():
        keys = [writers_key(config.key_prefix, pair)]
        args: list[str | int] = [writer, write.seq, slice_ttl_s(config.window_s, config.slice_s)]
        for index, summaries in sorted(write.counts.slices.items()):
            summary = summaries.get(pair)
            if summary is None:
                continue
            keys.append(slice_key(config.key_prefix, pair, index, config.slice_s))
            fields = list(summary_fields(summary))
            args.append(len(fields))
            for name, n in fields:
                args += (name, n)
        client.eval(_OLD_ADD_SLICES, len(keys), *keys, *args)


async def test_slices_written_as_the_former_script_wrote_them(redis_server: RedisServer, prefix: str) -> None:
    """Three sealed writes of four deployments over several slices, each sent twice (a lost reply: applied once):
    the same slice hashes, writers hashes and TTLs as the former argument layout."""
    sync = redis_server.client()
    client = redis.asyncio.Redis(port=redis_server.port, decode_responses=True)
    configs = {
        side: StatsConfig(backend="redis", redis_url=redis_server.url, key_prefix=f"{prefix}-{side}")
        for side in ("new", "old")
    }
    pending = PendingWrites()
    now = 1_800_000_000.0
    try:
        for flush in range(3):
            batch = WriteBuffer()
            for number, sample in enumerate(_samples(300, seed=31 + flush)):
                batch.add(slice_index(now + number * 0.1, 10), sample, room=10**9)
            assert not pending.seal(batch)
            for _ in range(2):
                outcome = await write_pending(client, configs["new"], "w1", pending, IndexDebt(), now)
                assert outcome.error is None and outcome.done == set(pending.writes)
                _old_write_pending(sync, configs["old"], "w1", pending)
            for pair, write in list(pending.writes.items()):
                pending.done(pair, write)
            now += 30
        found = _same_on_both_sides(sync, prefix)
        assert sum(key.endswith(":writers") for key in found) == 4
        assert len(found) > 4 * 3, sorted(found)
    finally:
        await client.aclose()
        sync.close()
