"""What the gateway adds: TTFT, end-to-end, throughput and CPU, against the same client going direct.

Starts a fake provider and the gateway as separate processes (``python -m gateway ...``), then
drives streamed chat requests with an aiohttp client, first straight at the fake provider and
then through the gateway, at concurrency 1 and 64, for an unpaced fake (as fast as it can
stream: the gateway's cost is most visible) and a paced one (realistic first-token time and
speed). Every run is bounded in request count and in time. Results go to
``benchmarks/results/overhead.md``.

    python -m benchmarks.overhead            # the default run, a few minutes
    python -m benchmarks.overhead --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import aiohttp
import uvloop

from gateway.meter import StreamMeter

RESULTS = Path(__file__).resolve().parent / "results" / "overhead.md"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something."}], "stream": True}


@dataclass(frozen=True)
class Variant:
    name: str
    ttft_s: float
    tokens_per_s: float
    tokens: int


@dataclass(frozen=True)
class Scenario:
    variant: Variant
    concurrency: int
    requests: int
    time_limit_s: float


@dataclass
class RunResult:
    ok: int = 0
    errors: int = 0
    wall_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds used by each server process during the run."""

    @property
    def rate(self) -> float:
        return self.ok / self.wall_s if self.wall_s else 0.0


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (no interpolation): an observed value, as percentiles are reported."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A ``python -m gateway`` subprocess, stopped (by its own PID) when the block ends."""
    child = subprocess.Popen([sys.executable, "-m", "gateway", *args], stdout=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


async def wait_ready(url: str, child: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise RuntimeError(f"{child.args!r} exited with {child.returncode}")
            try:
                async with session.get(url) as response:
                    if response.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} not ready within {timeout} s")


async def one_request(session: aiohttp.ClientSession, url: str, result: RunResult) -> None:
    started = time.perf_counter()
    meter = StreamMeter(time.perf_counter, started)
    try:
        async with session.post(url, json=BODY) as response:
            if response.status != 200:
                await response.read()
                result.errors += 1
                return
            async for chunk in response.content.iter_any():
                meter.feed(chunk)
    except (aiohttp.ClientError, TimeoutError):
        result.errors += 1
        return
    if meter.ttft_s is None or not meter.done:
        result.errors += 1
        return
    result.ok += 1
    result.ttft_s.append(meter.ttft_s)
    result.e2e_s.append(time.perf_counter() - started)


async def drive(url: str, scenario: Scenario, pids: dict[str, int]) -> RunResult:
    """``scenario.requests`` streamed requests at ``scenario.concurrency``, stopped early at the time limit."""
    result = RunResult()
    connector = aiohttp.TCPConnector(limit=scenario.concurrency, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # Warm the connection pool and the servers' code paths; not counted.
        await asyncio.gather(*(one_request(session, url, RunResult()) for _ in range(scenario.concurrency)))
        remaining = scenario.requests
        deadline = time.monotonic() + scenario.time_limit_s
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                await one_request(session, url, result)

        await asyncio.gather(*(worker() for _ in range(scenario.concurrency)))
        result.wall_s = time.perf_counter() - started
        result.cpu_s = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    return result


def gateway_config(fake_port: int, gateway_port: int) -> str:
    return f"""
[server]
port = {gateway_port}

[[providers]]
name = "fake"
base_url = "http://127.0.0.1:{fake_port}/v1"
max_concurrency = 256

[[models]]
name = "bench"
policy = "bench"
  [[models.deployments]]
  provider = "fake"
  model = "fake-model"

[policies.bench]
max_attempts = 1
first_token_timeout_s = 30
idle_timeout_s = 30
total_timeout_s = 60
"""


async def run_variant(variant: Variant, scenarios: list[Scenario]) -> list[tuple[Scenario, RunResult, RunResult]]:
    fake_port, gateway_port = free_port(), free_port()
    fake_args = ["fake-provider", "--port", str(fake_port), "--name", "fake"]
    fake_args += ["--ttft", str(variant.ttft_s), "--tps", str(variant.tokens_per_s), "--tokens", str(variant.tokens)]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "bench.toml"
        config.write_text(gateway_config(fake_port, gateway_port))
        with process(fake_args) as fake, process(["serve", "-c", str(config), "--log-level", "warning"]) as gateway:
            await wait_ready(f"http://127.0.0.1:{fake_port}/_fake/state", fake)
            await wait_ready(f"http://127.0.0.1:{gateway_port}/healthz", gateway)
            direct_url = f"http://127.0.0.1:{fake_port}/v1/chat/completions"
            via_url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
            for scenario in scenarios:
                direct = await drive(direct_url, scenario, {"fake": fake.pid})
                via = await drive(via_url, scenario, {"fake": fake.pid, "gateway": gateway.pid})
                rows.append((scenario, direct, via))
                print(summary_line(scenario, direct, via), flush=True)
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def summary_line(scenario: Scenario, direct: RunResult, via: RunResult) -> str:
    return (
        f"{scenario.variant.name:8} c={scenario.concurrency:<3} "
        f"direct {direct.ok} ok/{direct.errors} err {direct.rate:7.1f} req/s "
        f"ttft p50 {ms(quantile(direct.ttft_s, 0.5))} ms | "
        f"via {via.ok} ok/{via.errors} err {via.rate:7.1f} req/s ttft p50 {ms(quantile(via.ttft_s, 0.5))} ms | "
        f"gateway cpu {ms(via.cpu_s['gateway'] / max(1, via.ok))} ms/req"
    )


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("aiohttp", "uvicorn", "uvloop", "httptools"))
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs ({model}), {platform.platform()}, "
        f"Python {platform.python_version()}; {versions}"
    )


def per_request_ms(result: RunResult, name: str) -> str:
    return f"{result.cpu_s[name] * 1000 / max(1, result.ok):.2f}"


def report(rows: list[tuple[Scenario, RunResult, RunResult]], command: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Gateway overhead",
        "",
        f"Measured {now} on {machine()}.",
        "",
        f"Command: `{command}`. The client (aiohttp on uvloop, one process), the fake provider and the",
        "gateway (each its own `python -m gateway` process, uvloop + httptools) share the machine's cores.",
        "Each run: streamed chat requests at the given concurrency, after one warm-up request per",
        "connection; TTFT is measured by the client (request sent → first content chunk), end-to-end",
        "to the last byte. *Added* = through the gateway minus direct, at the same percentile",
        "(a small negative figure is noise). Times in milliseconds.",
        "",
        "## Latency",
        "",
        "| fake | conc. | TTFT p50 direct | via | **added** | TTFT p99 direct | via | **added** "
        "| e2e p50 direct | via | **added** | e2e p99 direct | via | **added** |",
        "|" + "---|" * 14,
    ]
    for scenario, direct, via in rows:
        cells = [scenario.variant.name, str(scenario.concurrency)]
        for values_direct, values_via in ((direct.ttft_s, via.ttft_s), (direct.e2e_s, via.e2e_s)):
            for q in (0.5, 0.99):
                a, b = quantile(values_direct, q), quantile(values_via, q)
                cells += [ms(a), ms(b), f"**{ms(b - a)}**"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Throughput and CPU",
        "",
        "CPU is user + system time of each process over the run (`/proc/<pid>/stat`, 10 ms ticks) ÷ requests;",
        "on loopback the kernel's TCP work for each write is charged to the writer, so a process that",
        "relays every event as it comes pays a system call per event (the fake provider pays the same).",
        "",
        "| fake | conc. | requests direct / via (failed) | req/s direct | req/s via | **gateway CPU ms/req** "
        "| fake CPU ms/req direct | fake CPU ms/req via |",
        "|" + "---|" * 8,
    ]
    for scenario, direct, via in rows:
        cells = [scenario.variant.name, str(scenario.concurrency), f"{direct.ok} / {via.ok}"]
        if direct.errors or via.errors:
            cells[2] += f" ({direct.errors} / {via.errors})"
        cells += [f"{direct.rate:.0f}", f"{via.rate:.0f}", f"**{per_request_ms(via, 'gateway')}**"]
        cells += [per_request_ms(direct, "fake"), per_request_ms(via, "fake")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Fake variants:", ""]
    seen = []
    for scenario, _, _ in rows:
        variant = scenario.variant
        if variant.name not in seen:
            seen.append(variant.name)
            pace = (
                "unpaced (as fast as it can send)"
                if variant.tokens_per_s == 0
                else f"{variant.tokens_per_s:g} tokens/s"
            )
            lines.append(
                f"- `{variant.name}`: TTFT {variant.ttft_s:g} s, {variant.tokens} tokens (one per event), {pace}."
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per run at most")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    unpaced = Variant("unpaced", ttft_s=0.0, tokens_per_s=0.0, tokens=64)
    paced = Variant("paced", ttft_s=0.1, tokens_per_s=400.0, tokens=64)
    counts = {(unpaced, 1): 1000, (unpaced, 64): 5000, (paced, 1): 150, (paced, 64): 3000}
    rows = []
    for variant in (unpaced, paced):
        scenarios = [
            Scenario(variant, concurrency, max(10, int(counts[(variant, concurrency)] * scale)), args.time_limit)
            for concurrency in (1, 64)
        ]
        # The client on uvloop too, so that it is not the bottleneck it would be on asyncio's loop.
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            rows += runner.run(run_variant(variant, scenarios))
    command = "python -m benchmarks.overhead" + (" --quick" if args.quick else "")
    text = report(rows, command)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
