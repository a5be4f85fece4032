"""Real Redis topologies on loopback: a Redis Cluster (masters with replicas) and a Sentinel group.

Why: the gateway must survive what these do in production (MOVED and ASK while a slot moves, a
master killed and its replica promoted, a Sentinel failover), and only the real servers do it. Each
topology runs its own ``redis-server`` processes on free ports in the test's directory and stops
them by PID. Timeouts are low so that a failover takes a second or two, not the production
defaults' half a minute; everything that waits polls the servers with a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from gateway.config import StatsConfig
from tests.redis_server import INSTALL_HINT, RedisServer, RedisServerMissing, free_port

NODE_TIMEOUT_MS = 1000
"""Cluster: how long a master may be silent before it is failed over. Low, but not so low that a
busy test machine (shared by other jobs) makes a live node look dead."""
DOWN_AFTER_MS = 500
"""Sentinel: how long a master may be silent before the sentinels start a failover."""
SENTINEL_PASSWORD = "s3nt1nel-pw"
"""The session Sentinel group's password (master, replica and sentinels), given through the environment."""
SENTINEL_ENVIRON = {"REDIS_PASSWORD": SENTINEL_PASSWORD, "SENTINEL_PASSWORD": SENTINEL_PASSWORD}


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass  # a node still starting, or one just killed: ask again
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)  # polling servers we do not control


def _redis_cli() -> str:
    binary = shutil.which("redis-cli")
    if binary is None:
        raise RedisServerMissing(INSTALL_HINT.replace("redis-server is", "redis-cli is"))
    return binary


class ClusterNode:
    """One node of the test cluster, with a synchronous client for inspecting and steering it."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.port = server.port
        self.address = f"127.0.0.1:{server.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=2, socket_connect_timeout=1)

    def call(self, *args: str | int) -> object:
        with self.client() as client:
            return client.execute_command(*args)

    def node_id(self) -> str:
        return str(self.call("CLUSTER", "MYID"))

    def role(self) -> str:
        with self.client() as client:
            role: str = client.info("replication")["role"]
            return role


class LoopbackCluster:
    """``masters`` masters with ``replicas`` replicas each, created with ``redis-cli --cluster create``.

    ``url`` is a seed node (``redis://127.0.0.1:<port>``). ``kill_master_of(key)`` kills the master
    that holds ``key``'s slot and waits until its replica has taken over.
    """

    def __init__(self, workdir: Path, masters: int = 3, replicas: int = 1) -> None:
        self.workdir = workdir
        self.masters = masters
        self.replicas = replicas
        args = (
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            # Always let a replica take over, however long it was out of touch with its master.
            "--cluster-replica-validity-factor",
            "0",
            "--repl-diskless-sync-delay",
            "0",
        )
        self.args = args
        self.nodes = self._fresh_nodes()
        self.url = f"redis://127.0.0.1:{self.nodes[0].port}"

    def _fresh_nodes(self) -> list[ClusterNode]:
        """Nodes on free ports now (a port found free may be taken before the node binds it)."""
        workdir, args = self.workdir, self.args
        return [
            ClusterNode(
                RedisServer(
                    workdir,
                    port,
                    # The bus port defaults to port + 10000, past 65535 for a high free port: pick one too.
                    extra_args=(
                        *args,
                        "--cluster-config-file",
                        f"nodes-{port}.conf",
                        "--cluster-port",
                        str(free_port()),
                    ),
                )
            )
            for port in (free_port() for _ in range(self.masters * (1 + self.replicas)))
        ]

    def start(self, attempts: int = 3) -> LoopbackCluster:
        """Start every node and create the cluster. A node that cannot bind its port (another process took it
        between ``free_port`` and the bind) stops the ones started, and the nodes start again on fresh ports."""
        for attempt in range(attempts):
            try:
                for node in self.nodes:
                    node.server.start()
                break
            except RedisServerMissing:
                raise
            except RuntimeError:
                self.stop()
                if attempt == attempts - 1:
                    raise
                self.nodes = self._fresh_nodes()
                self.url = f"redis://127.0.0.1:{self.nodes[0].port}"
        command = [_redis_cli(), "--cluster", "create", *(n.address for n in self.nodes)]
        command += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {result.stdout}\n{result.stderr}")
        self.wait_healthy()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.server.stop()

    def live(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.server.running]

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every live node says the cluster is ok and they agree on who serves each slot."""

        def healthy() -> bool:
            views = set()
            for node in self.live():
                info = str(node.call("CLUSTER", "INFO"))
                if "cluster_state:ok" not in info:
                    return False
                views.add(tuple(sorted((str(s[0]), str(s[1]), str(s[2])) for s in self._slots(node))))
            return len(views) == 1

        wait_until(healthy, "the cluster to be healthy", timeout)

    @staticmethod
    def _slots(node: ClusterNode) -> list[list[object]]:
        slots = node.call("CLUSTER", "SLOTS")
        assert isinstance(slots, list)
        return slots

    def keyslot(self, key: str) -> int:
        """The slot the server computes for ``key`` (``CLUSTER KEYSLOT``)."""
        return int(str(self.live()[0].call("CLUSTER", "KEYSLOT", key)))

    def master_of_slot(self, slot: int) -> ClusterNode:
        for start, end, master, *_ in self._slots(self.live()[0]):
            assert isinstance(start, int) and isinstance(end, int) and isinstance(master, list)
            if start <= slot <= end:
                return self.node_at(int(master[1]))
        raise AssertionError(f"slot {slot} is not served")

    def node_at(self, port: int) -> ClusterNode:
        return next(node for node in self.nodes if node.port == port)

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        master_id = master.node_id()
        # CLUSTER NODES: "<id> <ip:port@bus-port> <flags> <master id or -> ..." per line.
        for line in str(master.call("CLUSTER", "NODES")).splitlines():
            _, address, flags, of, *_ = line.split()
            if "slave" in flags.split(",") and of == master_id:
                return self.node_at(int(address.split("@")[0].rsplit(":", 1)[1]))
        raise AssertionError(f"no replica of {master.address}")

    def kill_master_of_slot(self, slot: int) -> tuple[ClusterNode, ClusterNode]:
        """SIGKILL the master of ``slot``; returns (killed, promoted) once the replica serves the slot."""
        master = self.master_of_slot(slot)
        replica = self.replica_of(master)
        master.server.stop()
        wait_until(lambda: replica.role() == "master", f"{replica.address} to be promoted", timeout=30)
        self.wait_healthy()
        return master, replica

    def migrate_slot(self, slot: int, target: ClusterNode, between_batches: Callable[[], None] = lambda: None) -> None:
        """Move ``slot`` to ``target`` the way ``redis-cli --cluster reshard`` does, a few keys at a time:
        while it moves, clients get ``ASK`` (and ``TRYAGAIN`` for a multi-key call split across the two
        nodes); after it, ``MOVED``."""
        source = self.master_of_slot(slot)
        assert source is not target
        source_id, target_id = source.node_id(), target.node_id()
        target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while True:
            keys = source.call("CLUSTER", "GETKEYSINSLOT", slot, 2)
            assert isinstance(keys, list)
            if not keys:
                break
            source.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            between_batches()
        for node in self.live():
            if node.role() == "master":
                node.call("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.wait_healthy()


class SentinelGroup:
    """A master, one replica and three sentinels monitoring them as ``service``.

    The sentinels are told of each other and of the replica in their config files, so the group is
    ready at once rather than after the seconds of gossip it would otherwise take to discover itself.
    ``password`` is required by the master, the replica and the sentinels alike.
    """

    service = "mymaster"

    def __init__(self, workdir: Path, password: str | None = None, sentinels: int = 3) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.password = password
        auth = ("--requirepass", password, "--masterauth", password) if password else ()
        # A replica's full sync otherwise waits 5 s for more replicas to share the transfer.
        auth = (*auth, "--repl-diskless-sync-delay", "0")
        master_port, replica_port = free_port(), free_port()
        self.master = RedisServer(workdir, master_port, extra_args=auth)
        self.replica = RedisServer(
            workdir, replica_port, extra_args=(*auth, "--replicaof", "127.0.0.1", str(master_port))
        )
        self.data_servers = {master_port: self.master, replica_port: self.replica}
        ids = [f"{index + 1:040x}" for index in range(sentinels)]
        ports = [free_port() for _ in range(sentinels)]
        self.sentinels: list[RedisServer] = []
        for index, port in enumerate(ports):
            lines = [
                f"sentinel myid {ids[index]}",
                f"sentinel monitor {self.service} 127.0.0.1 {master_port} 2",
                f"sentinel down-after-milliseconds {self.service} {DOWN_AFTER_MS}",
                f"sentinel failover-timeout {self.service} 5000",
                f"sentinel parallel-syncs {self.service} 1",
                f"sentinel known-replica {self.service} 127.0.0.1 {replica_port}",
            ]
            lines += [
                f"sentinel known-sentinel {self.service} 127.0.0.1 {other} {ids[o]}"
                for o, other in enumerate(ports)
                if o != index
            ]
            if password:
                lines += [f"sentinel auth-pass {self.service} {password}", f"requirepass {password}"]
            config = workdir / f"sentinel-{port}.conf"
            config.write_text("\n".join(lines) + "\n")
            self.sentinels.append(RedisServer(workdir, port, extra_args=("--sentinel",), config_file=config))
        self.addresses = [f"127.0.0.1:{port}" for port in ports]

    def start(self) -> SentinelGroup:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for server in (self.master, self.replica):
            server.password = self.password
            server.start()
        for sentinel in self.sentinels:
            sentinel.password = self.password
            sentinel.start()
        wait_until(self._replica_in_sync, "the replica to sync with the master")
        wait_until(self._sentinels_agree, "the sentinels to see the master, the replica and each other")
        return self

    def stop(self) -> None:
        for server in (*self.sentinels, self.master, self.replica):
            server.stop()

    def _client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(
            port=server.port, password=self.password, decode_responses=True, socket_timeout=2, socket_connect_timeout=1
        )

    def _replica_in_sync(self) -> bool:
        with self._client(self.replica) as client:
            return bool(client.info("replication")["master_link_status"] == "up")

    def _sentinel_view(self, sentinel: RedisServer) -> dict[str, object]:
        with self._client(sentinel) as client:
            view: dict[str, object] = client.execute_command("SENTINEL", "MASTER", self.service)
            return view

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            view = self._sentinel_view(sentinel)
            if int(str(view["num-other-sentinels"])) != len(self.sentinels) - 1 or int(str(view["num-slaves"])) < 1:
                return False
        return True

    def stats_config(self, **fields: Any) -> StatsConfig:
        """``[stats]`` on this group (its passwords named as ``SENTINEL_ENVIRON`` holds them), ``fields`` beside."""
        return StatsConfig(
            backend="redis",
            redis_mode="sentinel",
            redis_sentinels=tuple(self.addresses),
            redis_sentinel_service=self.service,
            redis_password_env="REDIS_PASSWORD",
            redis_sentinel_password_env="SENTINEL_PASSWORD",
            **fields,
        )

    def master_port(self) -> int:
        """The master's port as the sentinels report it."""
        with self._client(self.sentinels[0]) as client:
            _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
            return int(port)

    def role(self, server: RedisServer) -> str:
        with self._client(server) as client:
            role: str = client.info("replication")["role"]
            return role

    def failover(self) -> RedisServer:
        """``SENTINEL FAILOVER``: the replica is promoted and the master demoted. Returns the new master."""
        old = self.data_servers[self.master_port()]
        new = next(server for server in self.data_servers.values() if server is not old)
        with self._client(self.sentinels[0]) as client:
            client.execute_command("SENTINEL", "FAILOVER", self.service)
        self._wait_promoted(new)
        return new

    def kill_master(self) -> RedisServer:
        """SIGKILL the master; returns the replica once the sentinels have promoted it."""
        old = self.data_servers[self.master_port()]
        new = next(server for server in self.data_servers.values() if server is not old)
        old.stop()
        self._wait_promoted(new)
        return new

    def _wait_promoted(self, new: RedisServer) -> None:
        def promoted() -> bool:
            return self.role(new) == "master" and all(
                int(str(self._sentinel_view(s)["port"])) == new.port for s in self.sentinels if s.running
            )

        wait_until(promoted, f"the sentinels to promote 127.0.0.1:{new.port}", timeout=30)

    def data_clients(self) -> Sequence[redis.Redis]:
        return [self._client(server) for server in self.data_servers.values() if server.running]
