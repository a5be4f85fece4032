"""When a node's stats writes count as on enough replicas (``redis_wait_replicas``), from its ``INFO
replication`` and ``WAIT`` replies. The forced failover itself is in ``test_redis_failover.py``."""

from __future__ import annotations

from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.stats.redis_replicas import ReplicaMemory, Unreplicated


def info(replicas: int, replid: str = "r1") -> dict[str, object]:
    return {"role": "master", "connected_slaves": replicas, "master_replid": replid}


def test_writes_count_once_as_many_replicas_as_asked_or_all_there_are_have_them() -> None:
    memory = ReplicaMemory()
    assert memory.confirmed("", info(2), 1, wait_replicas=1) is None
    assert isinstance(memory.confirmed("", info(2), 0, wait_replicas=1), Unreplicated)  # WAIT fell short
    assert memory.confirmed("a", info(0), 0, wait_replicas=1) is None  # never had one: all there is


def test_a_master_that_lost_its_replica_holds_its_writes_until_one_is_back() -> None:
    memory = ReplicaMemory()
    assert memory.confirmed("", info(1), 1, wait_replicas=1) is None
    for _ in range(3):
        shortfall = memory.confirmed("", info(0), 0, wait_replicas=1)
        assert isinstance(shortfall, Unreplicated) and "had 1 replicas and has 0" in str(shortfall)
    assert memory.confirmed("", info(1), 1, wait_replicas=1) is None


def test_the_master_a_failover_promotes_counts_from_its_own_replicas() -> None:
    memory = ReplicaMemory()
    assert memory.confirmed("", info(1, "old"), 1, wait_replicas=1) is None
    assert isinstance(memory.confirmed("", info(0, "old"), 0, wait_replicas=1), Unreplicated)  # promoted away
    assert memory.confirmed("", info(0, "new"), 0, wait_replicas=1) is None  # the promoted one, no replica yet
    assert memory.confirmed("", info(1, "new"), 1, wait_replicas=1) is None  # the old master now its replica


def test_nodes_are_remembered_apart_and_errors_are_returned() -> None:
    memory = ReplicaMemory()
    assert memory.confirmed("a", info(1), 1, wait_replicas=1) is None
    assert memory.confirmed("b", info(0), 0, wait_replicas=1) is None  # b never had one
    error = RedisTimeoutError("slow")
    assert memory.confirmed("a", error, 1, wait_replicas=1) is error
    assert memory.confirmed("a", info(1), error, wait_replicas=1) is error
