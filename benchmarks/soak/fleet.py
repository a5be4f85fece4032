"""The processes of the soak: a redis-server, three fake providers and two replicas, each started and
stopped by PID, and the config the replicas share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from benchmarks.procs import free_port
from gateway.fakes.provider import answer_words
from tests.redis_server import RedisServer

RESULTS = Path(__file__).resolve().parents[1] / "results" / "soak.md"
CLIENT_KEY = "soak-client-key"
TOKENS = 32
WINDOW_S = 60
EXPECTED = "".join(answer_words(0, TOKENS))
BODY = {"model": "soak", "messages": [{"role": "user", "content": "Tell me about the fox."}], "stream": True}


@dataclass(frozen=True)
class FakeSpec:
    """One fake provider: shaped like a fast, a middling and a slow host of the same model."""

    name: str
    ttft_s: float
    tokens_per_s: float
    price: float


# Paced so that 240 streams in flight keep the machine (7 processes on 2 cores) busy but not saturated.
FAKES = (FakeSpec("swift", 0.15, 25.0, 0.9), FakeSpec("steady", 0.3, 20.0, 0.6), FakeSpec("thrifty", 0.5, 16.0, 0.3))


@dataclass
class Fleet:
    """The processes under test, all started and stopped (by PID) by this run."""

    workdir: Path
    redis: RedisServer
    fakes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    fake_ports: dict[str, int] = field(default_factory=dict)
    replicas: list[subprocess.Popen[bytes]] = field(default_factory=list)
    replica_urls: list[str] = field(default_factory=list)


def config_text(fleet: Fleet, port: int) -> str:
    providers = "\n".join(
        f'[[providers]]\nname = "{spec.name}"\nbase_url = "http://127.0.0.1:{fleet.fake_ports[spec.name]}/v1"\n'
        "max_concurrency = 512\n"
        for spec in FAKES
    )
    deployments = "\n".join(
        f'  [[models.deployments]]\n  provider = "{spec.name}"\n  model = "{spec.name}-model"\n'
        f"  price_in = {spec.price}\n  price_out = {spec.price * 2}\n  continue_prefill = true\n"
        for spec in FAKES
    )
    return f"""
[server]
host = "127.0.0.1"
port = {port}
access_log = false
shutdown_grace_s = 5

[stats]
backend = "redis"
redis_url = "{fleet.redis.url}"
window_s = {WINDOW_S}
slice_s = 5
key_prefix = "soak"
redis_timeout_s = 0.5

[auth]
api_keys_env = "SOAK_CLIENT_KEYS"
admin_key_env = "SOAK_ADMIN_KEY"

[limits]
max_in_flight = 2048
requests_per_minute_per_key = 10000000
tokens_per_minute_per_key = 1000000000

{providers}
[[models]]
name = "soak"
policy = "soak"
{deployments}
[policies.soak]
extends = "balanced"
connect_timeout_s = 2.0
first_token_timeout_s = 5.0
idle_timeout_s = 5.0
total_timeout_s = 60.0
failure_threshold = 3
cooldown_s = 2.0
"""


def spawn(args: list[str], log: Path, heap_dir: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m gateway ARGS``; with ``heap_dir``, through ``benchmarks.soak.heap`` (a record of its heap
    written there on each SIGUSR1, nothing else)."""
    env = {**os.environ, "SOAK_CLIENT_KEYS": CLIENT_KEY, "SOAK_ADMIN_KEY": "soak-admin-key"}
    module = "gateway"
    if heap_dir is not None:
        module = "benchmarks.soak.heap"
        env["SOAK_HEAP_DIR"] = str(heap_dir)
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.DEVNULL, stderr=sink, env=env)


def stop(process: subprocess.Popen[bytes], how: signal.Signals = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(how)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def fleet_up(workdir: Path, heap_dir: Path) -> Iterator[Fleet]:
    """Start the fleet; the replicas write their heap records (``benchmarks.soak.heap``) to ``heap_dir``."""
    heap_dir.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(workdir, RedisServer(workdir / "redis").start())
    try:
        for index, spec in enumerate(FAKES):
            port = free_port()
            fleet.fake_ports[spec.name] = port
            fleet.fakes[spec.name] = spawn(
                [
                    "fake-provider",
                    "--name",
                    spec.name,
                    "--port",
                    str(port),
                    "--ttft",
                    str(spec.ttft_s),
                    "--tps",
                    str(spec.tokens_per_s),
                    "--tokens",
                    str(TOKENS),
                    "--jitter",
                    "0.2",
                    "--seed",
                    str(index + 1),
                ],
                workdir / f"fake-{spec.name}.log",
            )
        for index in range(2):
            port = free_port()
            config = workdir / f"replica-{index}.toml"
            config.write_text(config_text(fleet, port))
            fleet.replicas.append(spawn(["serve", "-c", str(config)], workdir / f"replica-{index}.log", heap_dir))
            fleet.replica_urls.append(f"http://127.0.0.1:{port}")
        yield fleet
    finally:
        for process in [*fleet.replicas, *fleet.fakes.values()]:
            stop(process)
        fleet.redis.stop()


async def wait_ready(fleet: Fleet, timeout: float = 60) -> None:
    urls = [
        *(f"{u}/healthz" for u in fleet.replica_urls),
        *(f"http://127.0.0.1:{p}/v1/models" for p in fleet.fake_ports.values()),
    ]
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        for url in urls:
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url) as response:
                        if response.status < 500:
                            break
                for process in [*fleet.replicas, *fleet.fakes.values()]:
                    if process.poll() is not None:
                        raise RuntimeError(
                            f"{process.args!r} exited with {process.returncode} (logs in {fleet.workdir})"
                        )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} not ready within {timeout} s")
                await asyncio.sleep(0.05)
