"""Whether a node's stats writes are on enough replicas to survive a failover (``redis_wait_replicas``).

Each node's pipeline ends with ``INFO replication`` and ``WAIT n`` (``gateway.stats.redis_writes``): the
writes count as done once n of the node's replicas have them, or all it has if fewer, since a master
that never had more has no more durability to give.

A master with fewer replicas than it had under the same replication id is the exception. That is what
a master looks like once a failover has promoted its replica away from it: Sentinel leaves the old
master up, taking writes, until it demotes it (about ten seconds after ``SENTINEL FAILOVER``), and every
write it took meanwhile is gone once it resyncs as a replica. The promoted replica starts a new
replication id, so the memory is per (node, id): the old master's writes wait, the store drops its
connections (``after_failure``), and they go to the master the topology names next, which counts from
its own replicas. A master whose replica died with nothing failed over holds its writes until one is
back, as Redis's own ``min-replicas-to-write`` would refuse them: the store says so while it waits.
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError


class Unreplicated(RedisConnectionError):
    """Fewer replicas than ``redis_wait_replicas`` confirmed a node's writes in time, or the node lost one."""


class ReplicaMemory:
    """Per (node, replication id), the most replicas the node has had (node ``""``: the one master of a
    standalone or Sentinel client)."""

    def __init__(self) -> None:
        self.had: dict[tuple[str, str], int] = {}

    def confirmed(self, node: str, info: object, acks: object, wait_replicas: int) -> BaseException | None:
        """None if the node's writes count as done, given its ``INFO replication`` and ``WAIT`` replies; else
        why not."""
        for result in (info, acks):
            if isinstance(result, BaseException):
                return result
        fields = info if isinstance(info, dict) else {}
        replicas = int(fields.get("connected_slaves", 0))
        key = (node, str(fields.get("master_replid", "")))
        had = max(self.had.get(key, 0), replicas)
        self.had[key] = had
        if replicas < min(wait_replicas, had):
            return Unreplicated(
                f"the master had {had} replicas and has {replicas}: the stats writes wait for one to return, "
                "or for the master a failover names"
            )
        needed = min(wait_replicas, replicas)
        if not isinstance(acks, int) or acks < needed:
            return Unreplicated(f"{acks} of {needed} replicas confirmed the stats writes in time")
        return None


__all__ = ["ReplicaMemory", "Unreplicated"]
