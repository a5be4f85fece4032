"""A real ``redis-server`` on a free loopback port, started and stopped by the test that needs it.

Why: the Redis stats backend is tested against the real thing (pipelines, TTLs, hash fields,
connection loss), never a fake, and each test run gets its own isolated server so that tests
do not see each other's keys or a developer's Redis. ``stop`` kills by PID (the outage tests
kill it mid-traffic) and ``start`` brings it back on the same port, empty: it runs with no
persistence (``--save '' --appendonly no``). ``extra_args`` and ``config_file`` let the cluster and
Sentinel fixtures (``tests/redis_topologies.py``) run the same binary as cluster nodes, replicas and
sentinels.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis

INSTALL_HINT = (
    "redis-server is not installed or not on PATH; the Redis stats tests need a real server. "
    "Install it (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`)."
)


class RedisServerMissing(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process. ``url`` is ``redis://127.0.0.1:<port>/0``."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        password: str | None = None,
        *,
        extra_args: Sequence[str] = (),
        config_file: Path | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerMissing(INSTALL_HINT)
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.password = password
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.extra_args = tuple(extra_args)
        self.config_file = config_file
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"redis-{self.port}.log"
        config = [str(self.config_file)] if self.config_file is not None else []
        self.process = subprocess.Popen(
            [
                self.binary,
                *config,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--logfile",
                str(log),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2, socket_timeout=0.5)
        try:
            while True:
                if self.process.poll() is not None:
                    error = self.process.stderr.read().decode() if self.process.stderr else ""
                    raise RuntimeError(f"redis-server exited at start (status {self.process.returncode}): {error}")
                try:
                    # Ours, not another worker's server that held the port first (ours then fails to bind).
                    if client.ping() and client.info("server")["process_id"] == self.process.pid:
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not answer PING within {timeout}s")
                time.sleep(0.01)  # polling for readiness of a process we do not control
        finally:
            client.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Kill the server (SIGKILL: an outage, not a shutdown) and wait for it to be gone."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stderr:
            process.stderr.close()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, decode_responses=True)

    def command_calls(self) -> dict[str, int]:
        """Calls per command so far (``INFO commandstats``), e.g. ``{"hincrby": 120, ...}``."""
        with self.client() as client:
            info = client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}
