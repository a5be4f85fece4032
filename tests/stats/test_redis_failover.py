"""Failovers under traffic through two gateway replicas: a Redis Cluster master killed (its replica
promoted), a slot moved between masters (``ASK``, ``TRYAGAIN``, then ``MOVED``), a Sentinel
failover forced and a Sentinel master killed. In every case: zero failed client requests, no
sample dropped, and both replicas' leaderboards equal again within seconds, counting each sample
recorded exactly once. Real servers on loopback (``tests/redis_topologies.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.fakes import FakeBehavior
from gateway.stats import RedisStatsStore
from gateway.stats.redis_layout import slice_key
from gateway.stats.redis_store import read_shared_snapshot
from gateway.stats.window import slice_index
from tests.redis_server import RedisServerMissing
from tests.redis_topologies import SENTINEL_ENVIRON, LoopbackCluster, SentinelGroup
from tests.stats.failover import assert_replicas_converge, failover_config, failover_traffic, stats_document
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.samples import make_sample
from tests.support.stats import samples_of
from tests.support.wait import wait_until

pytestmark = pytest.mark.timeout(120)
# Each test asks for its Redis topology first, so that it is set up before the gateways and stopped
# after them (fixtures are torn down in reverse).


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LoopbackCluster]:
    try:
        cluster = LoopbackCluster(tmp_path / "cluster").start()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def own_sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    try:
        group = SentinelGroup(tmp_path / "sentinel", password=SENTINEL_ENVIRON["REDIS_PASSWORD"]).start()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield group
    group.stop()


def providers(fakes: Fakes) -> list[FakeServer]:
    return [fakes.start(name, FakeBehavior(output_tokens=8, tokens_per_s=2000)) for name in ("a", "b")]


def slot_of_pair(cluster: LoopbackCluster, prefix: str, model: str, deployment: str) -> int:
    index = slice_index(time.time(), 10)
    return cluster.keyslot(slice_key(prefix, (model, deployment), index, 10))


def test_cluster_master_killed_under_traffic(
    own_cluster: LoopbackCluster, fakes: Fakes, start_gateway: Callable[..., Gateway], prefix: str, tmp_path: Path
) -> None:
    stats = {"redis_mode": "cluster", "redis_url": own_cluster.url, "key_prefix": prefix}
    config = failover_config(providers(fakes), stats, tmp_path)
    gateways = [start_gateway(config) for _ in range(2)]
    slot = slot_of_pair(own_cluster, prefix, "alpha", "a")

    with failover_traffic(gateways) as traffic:
        wait_until(traffic.served_more_than(40), timeout=15, what="traffic before the failover")
        killed, promoted = own_cluster.kill_master_of_slot(slot)
        assert own_cluster.master_of_slot(slot) is promoted and not killed.server.running
        traffic.keep_going(60, "traffic after the failover")

    assert traffic.failures == []
    assert_replicas_converge(gateways)


def test_cluster_slot_moved_under_traffic(
    fakes: Fakes, start_gateway: Callable[..., Gateway], redis_cluster: LoopbackCluster, prefix: str, tmp_path: Path
) -> None:
    stats = {"redis_mode": "cluster", "redis_url": redis_cluster.url, "key_prefix": prefix}
    config = failover_config(providers(fakes), stats, tmp_path)
    gateways = [start_gateway(config) for _ in range(2)]
    slot = slot_of_pair(redis_cluster, prefix, "beta", "b")
    source = redis_cluster.master_of_slot(slot)
    target = next(n for n in redis_cluster.live() if n.role() == "master" and n is not source)

    with failover_traffic(gateways) as traffic:
        wait_until(traffic.served_more_than(40), timeout=15, what="traffic before the move")
        # Keys move one batch at a time, with traffic in between: writes meet ASK and TRYAGAIN.
        redis_cluster.migrate_slot(slot, target, between_batches=lambda: traffic.keep_going(5, "traffic mid-move"))
        assert redis_cluster.master_of_slot(slot) is target
        traffic.keep_going(40, "traffic after the move")

    assert traffic.failures == []
    # Nothing failed over: every sample recorded is in Redis exactly once.
    assert_replicas_converge(gateways)
    assert all(not stats_document(g)["store"]["degraded"] for g in gateways)


def sentinel_stats(group: SentinelGroup, prefix: str) -> dict[str, object]:
    return {
        "redis_mode": "sentinel",
        "redis_sentinels": group.addresses,
        "redis_sentinel_service": group.service,
        "redis_password_env": "REDIS_PASSWORD",
        "redis_sentinel_password_env": "SENTINEL_PASSWORD",
        "key_prefix": prefix,
    }


@pytest.mark.parametrize("how", ["forced", "master-killed"])
def test_sentinel_failover_under_traffic(
    how: str,
    own_sentinels: SentinelGroup,
    fakes: Fakes,
    start_gateway: Callable[..., Gateway],
    prefix: str,
    tmp_path: Path,
) -> None:
    config = failover_config(providers(fakes), sentinel_stats(own_sentinels, prefix), tmp_path)
    gateways = [start_gateway(config, dict(SENTINEL_ENVIRON)) for _ in range(2)]
    before = own_sentinels.master_port()

    with failover_traffic(gateways) as traffic:
        wait_until(traffic.served_more_than(40), timeout=15, what="traffic before the failover")
        new = own_sentinels.failover() if how == "forced" else own_sentinels.kill_master()
        assert new.port != before and own_sentinels.master_port() == new.port
        traffic.keep_going(60, "traffic after the failover")

    assert traffic.failures == []
    assert_replicas_converge(gateways)


def test_what_a_demoted_master_takes_after_a_forced_failover_is_not_lost(
    own_sentinels: SentinelGroup, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SENTINEL FAILOVER`` promotes the replica but leaves the old master up, taking writes with no replica
    left, until the sentinels demote it seconds later. A flush in between must not count as written: its
    samples reach the new master."""
    for name, value in SENTINEL_ENVIRON.items():
        monkeypatch.setenv(name, value)
    config = own_sentinels.stats_config(
        key_prefix=prefix, flush_interval_s=3600, refresh_interval_s=3600, redis_wait_replicas=1
    )

    async def failover() -> None:
        store = RedisStatsStore(config)
        await store.start()
        try:
            for _ in range(5):
                store.record(make_sample())
            await store.flush()  # on the first master, confirmed by its replica
            old = own_sentinels.data_servers[own_sentinels.master_port()]
            own_sentinels.failover()
            for _ in range(7):
                store.record(make_sample())
            await store.flush()
            assert own_sentinels.role(old) == "master"  # not demoted yet: the flush met the window
            for _ in range(3):
                if not (store.pending or store.buffer):
                    break
                await store.flush()
            assert samples_of(await read_shared_snapshot(config)) == 12
        finally:
            await store.aclose()

    asyncio.run(failover())
