"""One set of test bodies, run against both backends: what the router may rely on from any store.

The Redis store runs against a real ``redis-server``; its background intervals are set long so
that each test decides when it flushes and refreshes (``sync``), and the counts must come out
the same whenever that happens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.config import StatsConfig
from gateway.redis_client import RedisConnections
from gateway.samples import Outcome, RequestKind, Sample, Validity
from gateway.stats import InMemoryStatsStore, RedisStatsStore
from gateway.stats.answers import ANSWERS_KEPT
from gateway.stats.sketch import LogHistogram
from gateway.stats.snapshot import METRICS, sample_values
from tests.redis_topologies import SENTINEL_ENVIRON, SentinelGroup
from tests.support.clock import FakeClock
from tests.support.samples import make_sample
from tests.support.stats import samples_of

pytestmark = pytest.mark.anyio

AnyStore = InMemoryStatsStore | RedisStatsStore
OpenStore = Callable[..., Awaitable[AnyStore]]


def backend_config(request: pytest.FixtureRequest, kind: str) -> StatsConfig:
    """``[stats]`` for one backend: memory, or Redis as one server, a cluster or a Sentinel group."""
    if kind == "memory":
        return StatsConfig(backend="memory")
    if kind == "cluster":
        return StatsConfig(
            backend="redis", redis_mode="cluster", redis_url=request.getfixturevalue("redis_cluster").url
        )
    if kind == "sentinel":
        group: SentinelGroup = request.getfixturevalue("sentinel_group")
        return group.stats_config()
    return StatsConfig(backend="redis", redis_url=request.getfixturevalue("redis_server").url)


@pytest.fixture(params=["memory", "redis", "cluster", "sentinel"])
async def open_store(request: pytest.FixtureRequest, prefix: str, clock: FakeClock) -> AsyncIterator[OpenStore]:
    stores: list[AnyStore] = []
    connections: list[RedisConnections] = []
    base = backend_config(request, request.param)

    async def open_store(window_s: int = 60, slice_s: int = 10) -> AnyStore:
        config = dataclasses.replace(
            base,
            key_prefix=prefix,
            window_s=window_s,
            slice_s=slice_s,
            flush_interval_s=slice_s,
            refresh_interval_s=3600,
        )
        store: AnyStore
        if request.param == "memory":
            store = InMemoryStatsStore(config, clock)
        else:
            connections.append(RedisConnections(config, SENTINEL_ENVIRON))
            store = RedisStatsStore(config, clock, connections[-1])
        await store.start()
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        await store.aclose()
    for redis in connections:
        await redis.aclose()


async def test_own_samples_count_at_once_and_once(open_store: OpenStore) -> None:
    store = await open_store()
    for _ in range(10):
        store.record(make_sample())
    assert samples_of(store.snapshot()) == 10
    await store.sync()
    assert samples_of(store.snapshot()) == 10
    await store.sync()
    assert samples_of(store.snapshot()) == 10
    for _ in range(5):
        store.record(make_sample())
    assert samples_of(store.snapshot()) == 15
    await store.sync()
    assert samples_of(store.snapshot()) == 15
    health = store.health()
    assert not health.degraded and health.dropped_samples == 0 and health.buffered_samples == 0


async def test_samples_recorded_while_syncing_count_once(open_store: OpenStore) -> None:
    store = await open_store()
    for _ in range(7):
        store.record(make_sample())
    syncing = asyncio.create_task(store.sync())
    await asyncio.sleep(0)  # let the sync reach its first round trip
    for _ in range(4):
        store.record(make_sample(deployment="e"))
        store.record(make_sample())
    await syncing
    assert (samples_of(store.snapshot()), samples_of(store.snapshot(), deployment="e")) == (11, 4)
    await store.sync()
    assert (samples_of(store.snapshot()), samples_of(store.snapshot(), deployment="e")) == (11, 4)


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


async def test_quantiles_and_rates_match_the_samples(open_store: OpenStore) -> None:
    store = await open_store()
    rng = random.Random(7)
    failures: list[Outcome] = ["timeout", "upstream_error", "client_cancelled", "client_error"]
    oks: list[Outcome] = ["ok"] * 8
    outcomes = failures + oks
    taken: list[Sample] = []
    for _ in range(600):
        sample = make_sample(
            deployment=rng.choice(["fast", "slow"]),
            outcome=rng.choice(outcomes),
            ttft_s=rng.lognormvariate(-1.5, 0.8),
            tokens_per_s=rng.lognormvariate(4.5, 0.6),
            e2e_s=rng.lognormvariate(1.0, 0.7),
            output_tokens=rng.randint(1, 2000),
        )
        # Some providers report cached prompt tokens (the cache's metrics), some do not.
        prompt = rng.randint(200, 40_000)
        cached = rng.choice([None, 0, rng.randint(0, prompt)])
        sample = dataclasses.replace(sample, usage_prompt_tokens=prompt, usage_cached_tokens=cached)
        taken.append(sample)
        store.record(sample)
    for synced in (False, True):
        if synced:
            await store.sync()
        snapshot = store.snapshot()
        for deployment in ("fast", "slow"):
            mine = [s for s in taken if s.deployment == deployment]
            summary = snapshot.get("m", deployment)
            assert summary is not None and summary.samples == len(mine)
            judged = [s for s in mine if s.outcome not in ("client_cancelled", "client_error")]
            assert summary.attempts == len(judged)
            assert summary.success_rate() == pytest.approx(sum(s.outcome == "ok" for s in judged) / len(judged))
            for metric in METRICS:
                values = [v for s in mine for m, v in sample_values(s).items() if m == metric]
                assert summary.count(metric) == len(values) > 0, metric
                for q in (0.01, 0.05, 0.5, 0.95, 0.99):
                    estimate = summary.quantile(metric, q)
                    assert estimate == pytest.approx(exact(values, q), rel=0.02), (metric, q)
        lengths = [float(s.output_tokens) for s in taken if s.outcome == "ok" and s.output_tokens is not None]
        merged = LogHistogram.merged(
            summary.histograms["output_tokens"]
            for (model, _), summary in snapshot.summaries.items()
            if model == "m" and "output_tokens" in summary.histograms
        )  # the model's answer lengths over its deployments
        assert merged.quantile(0.5) == pytest.approx(exact(lengths, 0.5), rel=0.02)


async def test_samples_leave_the_window(open_store: OpenStore, clock: FakeClock) -> None:
    store = await open_store(window_s=60, slice_s=10)
    clock.now = 1_800_000_000.0
    store.record(make_sample(ttft_s=0.1))
    await store.sync()
    clock.advance(30)
    store.record(make_sample(ttft_s=0.3))
    await store.sync()
    assert samples_of(store.snapshot()) == 2
    clock.advance(30)
    await store.sync()
    assert samples_of(store.snapshot()) == 1
    clock.advance(30)
    await store.sync()
    assert store.snapshot().get("m", "d") is None
    store.record(make_sample())
    assert samples_of(store.snapshot()) == 1


async def test_validity_is_counted_per_kind_and_leaves_the_window(open_store: OpenStore, clock: FakeClock) -> None:
    """Every backend keeps judged answers by request kind and verdict, beside the outcomes, and ages them out."""
    store = await open_store(window_s=60, slice_s=10)
    clock.now = 1_800_000_000.0
    valid: tuple[RequestKind, Validity] = ("tools", "valid")
    broken: tuple[RequestKind, Validity] = ("tools", "tool_args_not_json")
    plain: tuple[RequestKind, Validity] = ("plain", "valid")
    judged = [valid] * 7 + [broken] * 3 + [plain] * 5
    for kind, verdict in judged:
        store.record(dataclasses.replace(make_sample(), kind=kind, validity=verdict))
    store.record(make_sample(outcome="timeout"))  # a failure is not judged
    for synced in (False, True):
        if synced:
            await store.sync()
        summary = store.snapshot().get("m", "d")
        assert summary is not None
        assert summary.valid_counts("tools") == (7, 10) and summary.valid_rate("plain") == 1.0
        assert summary.valid_counts() == (12, 15) and summary.valid_rate("json") is None
        assert summary.top_reason("tools") == "tool_args_not_json" and summary.top_reason("plain") is None
    clock.advance(70)
    store.record(dataclasses.replace(make_sample(), kind="json", validity="json_invalid"))
    await store.sync()
    summary = store.snapshot().get("m", "d")
    assert summary is not None and summary.validity == {"json:json_invalid": 1}


async def test_history_keeps_half_an_hour_in_minutes(open_store: OpenStore, clock: FakeClock) -> None:
    store = await open_store()
    clock.now = 1_800_000_000.0  # a minute's start: the samples below fall in two whole minutes
    for _ in range(3):
        store.record(make_sample(ttft_s=0.2, tokens_per_s=100.0))
    clock.advance(60)
    for _ in range(2):
        store.record(make_sample(ttft_s=1.5, tokens_per_s=20.0))
    store.record(make_sample(deployment="e", outcome="timeout", ttft_s=None, tokens_per_s=None))
    pairs = [("m", "d"), ("m", "e"), ("m", "never")]
    for _ in range(2):  # before and after the minutes reach Redis (and read again: settled ones cached)
        history = await store.history(pairs)
        d = history[("m", "d")]
        assert [(p.start, p.samples) for p in d] == [(1_800_000_000, 3), (1_800_000_060, 2)]
        assert d[0].ttft_p50_s == pytest.approx(0.2, rel=0.02) and d[0].tokens_per_s_p50 == pytest.approx(100, rel=0.02)
        assert d[1].ttft_p50_s == pytest.approx(1.5, rel=0.02) and d[1].tokens_per_s_p50 == pytest.approx(20, rel=0.02)
        assert [(p.samples, p.ttft_p50_s) for p in history[("m", "e")]] == [(1, None)]
        assert history[("m", "never")] == ()
        await store.sync()
    clock.advance(29 * 60)  # the first minute is now 30 minutes back: out
    assert [p.samples for p in (await store.history(pairs))[("m", "d")]] == [2]
    clock.advance(60)
    assert (await store.history(pairs))[("m", "d")] == ()


async def _replica_of(store: AnyStore, open_store: OpenStore) -> AnyStore:
    """A second replica on the same backend: a store over the same window (memory), or another on the same Redis."""
    if isinstance(store, InMemoryStatsStore):
        return store.as_replica("other")
    return await open_store()


async def test_answers_are_kept_one_by_one_tagged_and_shared_once(open_store: OpenStore, clock: FakeClock) -> None:
    """Every backend keeps each deployment's last answers (``gateway.stats.answers``) as they were recorded, tagged
    with the replica that recorded them, numbered by it, and hands every replica everyone's, each once, in order.
    Attempts that say nothing of the provider are not kept."""
    a = await open_store()
    b = await _replica_of(a, open_store)
    assert a.replica != b.replica
    lost = dataclasses.replace(
        make_sample(outcome="client_cancelled", tokens_per_s=None, output_tokens=None), hedged=True
    )
    told = [
        (a, dataclasses.replace(make_sample(ttft_s=0.25), usage_prompt_tokens=900, usage_cached_tokens=600)),
        (b, make_sample(ttft_s=0.5, tokens_per_s=40.0)),
        (a, make_sample(outcome="timeout", ttft_s=None, tokens_per_s=None)),
        (a, make_sample(outcome="client_error")),  # the request's fault: not kept
        (b, make_sample(outcome="client_cancelled", ttft_s=None, tokens_per_s=None, output_tokens=None)),  # not kept
        (b, lost),
    ]
    recorded_at = []
    for store, sample in told:
        clock.advance(0.5)
        store.record(sample)
        recorded_at.append(clock())
    mine = [(x.replica, x.seq, x.outcome) for x in a.snapshot().answers.of(("m", "d")) if x.replica == a.replica]
    assert mine[:2] == [(a.replica, 1, "ok"), (a.replica, 2, "timeout")]  # its own count at once
    for _ in range(2):
        for store in (a, b):
            await store.sync()
    for store in (a, b):
        snapshot = store.snapshot()
        assert snapshot.replica == store.replica
        log = snapshot.answers.of(("m", "d"))
        assert [(x.replica, x.seq, x.at) for x in log] == [
            (a.replica, 1, recorded_at[0]),
            (b.replica, 1, recorded_at[1]),
            (a.replica, 2, recorded_at[2]),
            (b.replica, 2, recorded_at[5]),
        ]
        first, second, failed, raced = log
        assert (first.ttft_s, first.tokens_per_s, first.output_tokens, first.uncached_tokens) == (0.25, 100.0, 50, 300)
        assert (second.ttft_s, second.tokens_per_s, second.uncached_tokens) == (0.5, 40.0, None)
        assert (failed.outcome, failed.ttft_s) == ("timeout", None)
        assert (raced.outcome, raced.hedged, raced.ttft_s, raced.drained) == ("client_cancelled", True, 0.2, False)
    mark = a.snapshot().answers.mark(("m", "d"))
    await a.sync()
    assert a.snapshot().answers.mark(("m", "d")) == mark  # nothing new: a reader compares one mark


async def test_the_answers_kept_are_bounded(open_store: OpenStore, clock: FakeClock) -> None:
    """``ANSWERS_KEPT`` per deployment, the newest always among them, each once, in the order recorded. (Which older
    ones a replica still shows depends on when the writes landed: Redis keeps the last landed.)"""
    a = await open_store()
    b = await _replica_of(a, open_store)
    told = ANSWERS_KEPT + 20
    for i in range(told):
        clock.advance(0.01)
        (a if i % 2 else b).record(make_sample(ttft_s=0.1 + i / 1000))
        if i % 50 == 0:
            await a.sync()  # several writes: the list is trimmed by each
    for _ in range(2):
        for store in (a, b):
            await store.sync()
    for store in (a, b):
        log = store.snapshot().answers.of(("m", "d"))
        firsts = [round((x.ttft_s or 0) * 1000) - 100 for x in log]
        assert len(log) == ANSWERS_KEPT and firsts == sorted(set(firsts))
        assert firsts[-40:] == list(range(told - 40, told))
    assert [round((x.ttft_s or 0) * 1000) - 100 for x in a.snapshot().answers.of(("m", "d"))] == list(
        range(20, told)
    )  # a's own writes landed as it recorded: the last it shows are the last recorded
