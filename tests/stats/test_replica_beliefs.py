"""Two belief routers, each over its own Redis stats store on one real ``redis-server``: what one replica hears
directly, the other's beliefs hear once its store has written and the other's has read (the background sync,
here called by hand), as one answer at the time it ended; neither hears its own twice."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from gateway.config import StatsConfig
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate
from gateway.stats import RedisStatsStore
from tests.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.samples import make_sample

pytestmark = pytest.mark.anyio

WALL = 1_800_000_000.0


@pytest.fixture
async def stores(redis_server: RedisServer, prefix: str) -> AsyncIterator[tuple[FakeClock, list[RedisStatsStore]]]:
    clock = FakeClock(0.0)
    config = StatsConfig(
        backend="redis", redis_url=redis_server.url, key_prefix=prefix, flush_interval_s=3600, refresh_interval_s=3600
    )
    opened = [RedisStatsStore(config, lambda: WALL + clock()) for _ in range(2)]
    for store in opened:
        await store.start()
    yield clock, opened
    for store in opened:
        await store.aclose()


async def test_a_replicas_answer_reaches_the_others_beliefs_through_redis_once(
    stores: tuple[FakeClock, list[RedisStatsStore]],
) -> None:
    clock, (store_a, store_b) = stores
    config = gateway_config(["a", "b"], policy={"extends": "balanced"})
    one, two = (BeliefRouter(config, s, rng=random.Random(i), clock=clock) for i, s in enumerate((store_a, store_b)))
    model = config.models[0]
    request = RouteRequest(model, "chat", True, 20, 100, ProviderPreferences())
    a = Candidate(model.deployments[0], config.provider("a"), model=model.name)

    clock.advance(1.0)
    assert one.attempt_started(a)
    sample = make_sample(deployment="a", ttft_s=0.3, tokens_per_s=200.0)
    store_a.record(sample)
    one.attempt_finished(a, sample)
    ended = clock()
    clock.advance(0.5)
    two.plan(request)
    assert two.belief("m", "a").answers == 0  # not written, not read: nothing to hear yet
    await store_a.sync()
    await store_b.sync()
    clock.advance(0.5)
    two.plan(request)
    heard = two.belief("m", "a")
    assert heard.answers == 1 and heard.heard_at == pytest.approx(ended, abs=1e-6)
    mine = one.belief("m", "a")
    now = clock()
    assert heard.expected(now).ttft_s == pytest.approx(mine.expected(now).ttft_s, rel=1e-9)
    for _ in range(2):
        await store_a.sync()
        await store_b.sync()
        one.plan(request)
        two.plan(request)
    assert (one.belief("m", "a").answers, two.belief("m", "a").answers) == (1, 1)
