"""What only the Redis backend does: its key layout, sharing between replicas, the cache of
closed slices, outages, and the bound on what it buffers. All against a real ``redis-server``."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

import pytest
import redis
import redis.asyncio

from gateway.config import StatsConfig
from gateway.stats import RedisStatsStore, open_stats_store
from gateway.stats.answers import ANSWERS_KEPT, Answer, Recorder, decode
from gateway.stats.buffer import WriteBuffer
from gateway.stats.history import SPAN_S
from gateway.stats.redis_layout import answers_key, parse_pair_member
from gateway.stats.redis_reader import SharedWindowReader
from gateway.stats.redis_store import read_shared_snapshot
from gateway.stats.redis_writes import IndexDebt, PendingWrites, write_pending
from gateway.stats.sketch import bucket_of
from gateway.stats.window import slice_index
from gateway.types import DeploymentKey
from tests.redis_server import RedisServer, free_port
from tests.support.clock import FakeClock
from tests.support.samples import make_sample
from tests.support.stats import samples_of, total_outcomes

pytestmark = pytest.mark.anyio


def stats_config(url: str, prefix: str, **overrides: float) -> StatsConfig:
    values: dict[str, float] = {"window_s": 60, "slice_s": 10, "flush_interval_s": 10, "refresh_interval_s": 3600}
    values.update(overrides)
    return StatsConfig(
        backend="redis",
        redis_url=url,
        key_prefix=prefix,
        window_s=int(values["window_s"]),
        slice_s=int(values["slice_s"]),
        flush_interval_s=values["flush_interval_s"],
        refresh_interval_s=values["refresh_interval_s"],
        buffer_limit=int(values.get("buffer_limit", 100_000)),
        redis_timeout_s=0.5,
    )


@pytest.fixture
async def stores() -> AsyncIterator[list[RedisStatsStore]]:
    opened: list[RedisStatsStore] = []
    yield opened
    for store in opened:
        await store.aclose()


async def started(
    stores: list[RedisStatsStore], config: StatsConfig, clock: Callable[[], float] = time.time
) -> RedisStatsStore:
    store = RedisStatsStore(config, clock)
    stores.append(store)
    await store.start()
    return store


def hash_of(client: redis.Redis, key: str) -> dict[str, str]:
    return {str(field): str(value) for field, value in client.hgetall(key).items()}


def test_factory_picks_the_backend() -> None:
    assert isinstance(open_stats_store(StatsConfig(backend="redis")), RedisStatsStore)


async def test_key_layout(redis_server: RedisServer, prefix: str, stores: list[RedisStatsStore]) -> None:
    clock = FakeClock(1_800_000_005.0)
    store = await started(stores, stats_config(redis_server.url, prefix), clock)
    store.record(make_sample("llama:3 {x}", "groq", ttft_s=0.25, tokens_per_s=120.0))
    store.record(make_sample("llama:3 {x}", "groq", outcome="timeout", ttft_s=0.25, tokens_per_s=None, e2e_s=None))
    await store.flush()

    client = redis_server.client()
    key = f"{{{prefix}:llama%3A3%20%7Bx%7D:groq}}:1800000000"
    writers = f"{{{prefix}:llama%3A3%20%7Bx%7D:groq}}:writers"
    minute = f"{{{prefix}:llama%3A3%20%7Bx%7D:groq}}:m:1800000000"  # the dashboard's history, same hash tag
    answers = f"{{{prefix}:llama%3A3%20%7Bx%7D:groq}}:answers"  # the answers one by one, same hash tag
    assert set(client.keys(f"*{prefix}*")) == {key, writers, answers, f"{prefix}:pairs", minute}
    ok, timeout = (json.loads(raw) for raw in client.lrange(answers, 0, -1))
    assert ok == [store.writer, 1, 1_800_000_005.0, "ok", True, False, 0.25, 120.0, 50, None, None]
    assert timeout[:4] == [store.writer, 2, 1_800_000_005.0, "timeout"]
    assert 60 < client.ttl(answers) <= 60 + 10 + 60
    assert hash_of(client, minute) == {
        "outcome:ok": "1",
        "outcome:timeout": "1",
        f"ttft_s:{bucket_of(0.25)}": "2",
        f"tokens_per_s:{bucket_of(120.0)}": "1",
    }
    assert SPAN_S < client.ttl(minute) <= SPAN_S + 60 + 60
    # The store's one write there is numbered 1; a resent copy of it would be skipped.
    assert hash_of(client, writers) == {store.writer: "1"} and 60 < client.ttl(writers) <= 60 + 10 + 60
    fields = hash_of(client, key)
    assert fields["outcome:ok"] == "1" and fields["outcome:timeout"] == "1"
    assert fields[f"ttft_s:{bucket_of(0.25)}"] == "2"
    assert fields[f"tokens_per_s:{bucket_of(120.0)}"] == "1"
    assert fields[f"output_tokens:{bucket_of(50)}"] == "1"  # complete answers only
    assert 60 < client.ttl(key) <= 60 + 10 + 60
    assert 0 < client.ttl(f"{prefix}:pairs")
    (member,) = client.zrange(f"{prefix}:pairs", 0, -1)
    assert parse_pair_member(str(member)) == ("llama:3 {x}", "groq")
    # Two samples, one pipeline: the counts were summed before they were sent.
    assert client.hget(key, f"ttft_s:{bucket_of(0.25)}") == "2"

    # What a gateway did not write is skipped, not fatal: garbage counts, unknown fields.
    client.hset(key, mapping={"outcome:ok": "x", "ttft_s:abc": "3", "future_metric:12": "4", "outcome:timeout": "-1"})
    await store.sync()
    summary = store.snapshot().get("llama:3 {x}", "groq")
    assert summary is not None and summary.outcomes == {} and summary.count("ttft_s") == 2
    assert not store.health().degraded


async def test_replicas_see_each_other_and_count_themselves_once(
    redis_server: RedisServer, prefix: str, stores: list[RedisStatsStore]
) -> None:
    config = stats_config(redis_server.url, prefix)
    a, b = await started(stores, config), await started(stores, config)
    for _ in range(10):
        a.record(make_sample())
    for _ in range(7):
        b.record(make_sample(ttft_s=0.5))
    assert (samples_of(a.snapshot()), samples_of(b.snapshot())) == (10, 7)
    for _ in range(2):
        await a.sync()
        await b.sync()
    for store in (a, b):
        summary = store.snapshot().get("m", "d")
        assert summary is not None and summary.samples == 17 and summary.count("ttft_s") == 17
    a.record(make_sample())
    assert (samples_of(a.snapshot()), samples_of(b.snapshot())) == (18, 17)
    await a.sync()
    await b.sync()
    assert (samples_of(a.snapshot()), samples_of(b.snapshot())) == (18, 18)
    shared = await read_shared_snapshot(config)
    assert samples_of(shared) == 18


async def test_closed_slices_are_read_once(
    redis_server: RedisServer, prefix: str, stores: list[RedisStatsStore]
) -> None:
    clock = FakeClock(1_800_000_000.0)
    config = stats_config(redis_server.url, prefix, window_s=60, slice_s=10, flush_interval_s=0.2)
    writer = await started(stores, config, clock)
    reader = await started(stores, config, clock)
    for _ in range(6):  # one sample in each of six slices
        writer.record(make_sample())
        await writer.flush()
        clock.advance(10)
    await reader.sync()
    assert samples_of(reader.snapshot()) == 5  # the oldest has left
    before = reader.reader.hash_reads
    await reader.sync()
    await reader.sync()
    # Only the open slice (and the one just closed, until it settles) is read again.
    assert reader.reader.hash_reads - before <= 2 * 2
    assert samples_of(reader.snapshot()) == 5


async def test_a_late_write_makes_readers_read_again(
    redis_server: RedisServer, prefix: str, stores: list[RedisStatsStore]
) -> None:
    """Samples held through an outage land in slices readers have cached as closed: the writer
    replaces the epoch and readers re-read the window, so the late samples are not lost."""
    reader_clock, writer_clock = FakeClock(1_800_000_000.0), FakeClock(1_800_000_000.0)
    config = stats_config(redis_server.url, prefix)
    writer = await started(stores, config, writer_clock)
    reader = await started(stores, config, reader_clock)
    writer.record(make_sample())
    await writer.flush()
    reader_clock.advance(30)
    await reader.sync()
    assert samples_of(reader.snapshot()) == 1
    writer.record(make_sample())  # recorded at the old time, written 30 s later
    writer_clock.advance(30)
    await writer.flush()
    await reader.sync()
    assert samples_of(reader.snapshot()) == 2


async def test_redis_down_at_start_then_back(tmp_path, prefix: str, stores: list[RedisStatsStore]) -> None:
    port = free_port()
    config = stats_config(f"redis://:s3cret@127.0.0.1:{port}/0", prefix, flush_interval_s=0.05, refresh_interval_s=0.1)
    started_at = time.monotonic()
    store = await started(stores, config)
    assert time.monotonic() - started_at < 5  # start is bounded, not blocked on Redis
    health = store.health()
    assert health.degraded and health.reason is not None
    assert f"127.0.0.1:{port}" in health.reason and "s3cret" not in health.reason
    for _ in range(20):
        store.record(make_sample())
    assert samples_of(store.snapshot()) == 20
    assert store.health().buffered_samples == 20

    server = RedisServer(tmp_path, port=port, password="s3cret").start()
    try:
        deadline = time.monotonic() + 15
        while store.health().degraded or store.health().buffered_samples:
            assert time.monotonic() < deadline, store.health()
            await asyncio.sleep(0.05)
        assert total_outcomes(server.client(), prefix) == 20
        assert samples_of(store.snapshot()) == 20
        assert store.health().dropped_samples == 0
    finally:
        server.stop()


async def test_outage_mid_traffic_buffers_then_flushes(
    own_redis: RedisServer, prefix: str, stores: list[RedisStatsStore]
) -> None:
    config = stats_config(own_redis.url, prefix, flush_interval_s=0.05, refresh_interval_s=0.1)
    store = await started(stores, config)
    for _ in range(5):
        store.record(make_sample())
    await store.sync()
    own_redis.stop()
    for _ in range(8):
        store.record(make_sample())  # never waits, never raises
    await store.sync()
    health = store.health()
    assert health.degraded and health.buffered_samples == 8
    assert samples_of(store.snapshot()) == 13

    own_redis.start()
    deadline = time.monotonic() + 15
    while store.health().degraded or store.health().buffered_samples:
        assert time.monotonic() < deadline, store.health()
        await asyncio.sleep(0.05)
    # The restarted server is empty: it holds exactly what was buffered through the outage.
    assert total_outcomes(own_redis.client(), prefix) == 8


async def test_writes_refused_for_memory_are_held_and_written_once_memory_is_back(
    own_redis: RedisServer, prefix: str, stores: list[RedisStatsStore]
) -> None:
    """Out of memory under ``noeviction`` a script is refused at its first write, so nothing of it ran: the samples
    are held and sent again, not counted as written (redis-py's ``OutOfMemoryError`` drops the ``OOM`` prefix)."""
    config = stats_config(own_redis.url, prefix)
    store = await started(stores, config)
    store.record(make_sample())
    await store.sync()
    with own_redis.client() as admin:
        admin.config_set("maxmemory", "1")
        for _ in range(4):
            store.record(make_sample())
        await store.sync()
        assert store.health().degraded
        admin.config_set("maxmemory", "0")
    await store.sync()
    assert not store.health().degraded and store.health().buffered_samples == 0
    assert total_outcomes(own_redis.client(), prefix) == 5


async def test_the_buffer_is_bounded_and_drops_are_counted(
    tmp_path, prefix: str, stores: list[RedisStatsStore]
) -> None:
    config = stats_config(f"redis://127.0.0.1:{free_port()}/0", prefix, buffer_limit=40)
    store = await started(stores, config)
    assert store.health().degraded
    for i in range(200):  # every sample needs new cells: distinct TTFTs and speeds
        store.record(make_sample(ttft_s=0.01 * 1.05**i, tokens_per_s=10 * 1.05**i))
    kept = store.health().buffered_samples
    assert store.buffer.cells <= 40
    assert kept + store.health().dropped_samples == 200 and kept < 200
    for _ in range(100):  # fits cells already held: always kept
        store.record(make_sample(ttft_s=0.01, tokens_per_s=10))
    assert store.health().buffered_samples == kept + 100
    assert store.buffer.cells <= 40
    assert samples_of(store.snapshot()) == kept + 100


async def test_history_is_shared_by_replicas_and_expires(redis_server: RedisServer, prefix: str) -> None:
    config = StatsConfig(backend="redis", redis_url=redis_server.url, key_prefix=prefix, refresh_interval_s=3600)
    one, two = RedisStatsStore(config), RedisStatsStore(config)
    await one.start()
    await two.start()
    try:
        for _ in range(4):
            one.record(make_sample(ttft_s=0.3, tokens_per_s=80.0))
        two.record(make_sample(ttft_s=0.3, tokens_per_s=80.0))
        assert [p.samples for p in (await two.history([("m", "d")]))[("m", "d")]] == [1]  # its own, not yet written
        await one.sync()
        await two.sync()
        for store in (one, two):
            points = (await store.history([("m", "d")]))[("m", "d")]
            assert sum(p.samples for p in points) == 5
        client = redis.asyncio.Redis.from_url(redis_server.url)
        keys = [k async for k in client.scan_iter(match=f"{{{prefix}:*}}:m:*")]
        ttls = [await client.ttl(k) for k in keys]
        assert ttls and all(0 < ttl <= SPAN_S + 120 for ttl in ttls), ttls
        await client.aclose()
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_resent_write_appends_its_answers_once_and_the_list_is_trimmed(
    redis_server: RedisServer, prefix: str
) -> None:
    """A write whose reply was lost is sent again: its answers land once. Each write trims the list to
    ``ANSWERS_KEPT``, and what a gateway did not write there is skipped when read."""
    config = stats_config(redis_server.url, prefix)
    client = redis.asyncio.Redis(port=redis_server.port, decode_responses=True)
    sync = redis_server.client()
    recorder = Recorder("w1")
    pending = PendingWrites()
    pair = ("m", "d")
    key = answers_key(prefix, pair)
    try:
        for flush in range(3):
            batch = WriteBuffer()
            unsent: dict[DeploymentKey, deque[Answer]] = {pair: deque()}
            for i in range(50):
                sample = make_sample(ttft_s=0.1 + (flush * 50 + i) / 1000)
                batch.add(slice_index(1_800_000_000.0, 10), sample, room=10**9)
                answer = recorder.answer(sample, 1_800_000_000.0 + flush * 50 + i)
                assert answer is not None
                unsent[pair].append(answer)
            assert not pending.seal(batch, unsent) and not unsent
            for _ in range(2):  # the first reply lost
                outcome = await write_pending(client, config, "w1", pending, IndexDebt(), 1_800_000_000.0)
                assert outcome.error is None and outcome.done == {pair}
            pending.done(pair, pending.writes[pair])
            assert sync.llen(key) == min(50 * (flush + 1), ANSWERS_KEPT)
        kept = [decode(str(raw)) for raw in sync.lrange(key, 0, -1)]
        assert [a.seq for a in kept if a is not None] == list(range(151 - ANSWERS_KEPT, 151))
        sync.rpush(key, "not json", '["w2", 1]')
        reader = SharedWindowReader(config, lambda: 1_800_000_000.0)
        await reader.read(client)
        assert [a.seq for a in reader.answers[pair]] == list(range(151 - ANSWERS_KEPT, 151))
    finally:
        await client.aclose()
        sync.close()
