"""The overhead benchmark's machinery: the workloads, one measured run, and the sweep's ``Bench``.

Why its own module: the ratios (``benchmarks/overhead_ratios.py``) and the detailed sweep
(``benchmarks/overhead.py``) both measure runs and hold streams open; each imports this, and
neither imports the other.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import procs
from benchmarks.figures import Measurement, MemoryFigure, Workload
from benchmarks.loadgen import LoadGenerator, Run
from benchmarks.procs import MachineCpu, Server

UNPACED = Workload("unpaced", ttft_s=0.0, tokens_per_s=0.0, tokens=32)
PACED = Workload("paced", ttft_s=0.05, tokens_per_s=100.0, tokens=32)
HOLD = Workload("hold", ttft_s=0.0, tokens_per_s=4.0, tokens=48)
"""Slow streams for the memory figure: each stays open about 12 s."""
NOISY_CORES = 0.2
CONTENDED_IDLE_CORES = 0.4
"""A run is measured again when other programs took more than ``NOISY_CORES`` while the machine had
less than ``CONTENDED_IDLE_CORES`` idle: then they took CPU the benchmark's processes wanted."""


def measured(
    run: Run, workload: Workload, target: str, concurrency: int, fake: Server, server: Server, loadgen: LoadGenerator
) -> Measurement:
    """Go, wait, and the run's figures: the CPU each process group used, and what other programs took."""
    pids = {"fake": [fake.pid], "clients": loadgen.pids}
    if server is not fake:
        pids["proxy"] = [server.pid]
    before = {name: sum(procs.cpu_seconds(p) for p in group) for name, group in pids.items()}
    machine_before = MachineCpu.read()
    run.go()
    run.wait()
    used = {name: sum(procs.cpu_seconds(p) for p in group) - before[name] for name, group in pids.items()}
    machine = MachineCpu.read().since(machine_before)
    wall = max(run.outcome.wall_s, 1e-9)
    other = max(0.0, machine.busy - sum(used.values()) - machine.softirq) / wall
    return Measurement.of(workload, target, concurrency, run.outcome, used, machine.busy / wall, other)


@dataclass(frozen=True)
class Plan:
    """How much of each workload to run: (concurrency, request cap) pairs, each run also time-capped."""

    unpaced: tuple[tuple[int, int], ...]
    paced: tuple[tuple[int, int], ...]
    spread: tuple[tuple[int, int], ...]
    memory_streams: int
    time_limit_s: float


def nolog_variant(config_text: str) -> str:
    """The same config with ``[server] access_log = false``."""
    lines = [line for line in config_text.splitlines() if not re.match(r"\s*access_log\s*=", line)]
    if "[server]" not in (line.strip() for line in lines):
        lines.insert(0, "[server]")
    index = next(i for i, line in enumerate(lines) if line.strip() == "[server]")
    lines.insert(index + 1, "access_log = false")
    return "\n".join(lines) + "\n"


class Bench:
    """The fake, the load generator and a scratch folder shared by every step of one invocation."""

    def __init__(
        self, folder: Path, fake: Server, loadgen: LoadGenerator, config_text: str, plan: Plan, attempts: int
    ) -> None:
        self.attempts = attempts
        self.folder = folder
        self.fake = fake
        self.loadgen = loadgen
        self.config_text = config_text.replace("{fake_base_url}", fake.base_url)
        self.plan = plan

    @contextlib.contextmanager
    def targets(self, names: list[str]) -> Iterator[dict[str, Server]]:
        """Fresh proxy processes for one step (``direct`` is the fake itself)."""
        with contextlib.ExitStack() as stack:
            servers: dict[str, Server] = {}
            for name in names:
                if name == "direct":
                    servers[name] = self.fake
                elif name == "passthrough":
                    servers[name] = stack.enter_context(procs.passthrough(self.fake, self.folder))
                elif name == "gateway":
                    servers[name] = stack.enter_context(procs.gateway(self.config_text, name, self.folder))
                else:
                    config = nolog_variant(self.config_text)
                    servers[name] = stack.enter_context(procs.gateway(config, name, self.folder))
            yield servers

    def measure(self, workload: Workload, target: str, server: Server, concurrency: int, requests: int) -> Measurement:
        """One run; again (up to ``self.attempts`` runs) while other programs contended for the
        cores, keeping the quietest."""
        best: Measurement | None = None
        cores = os.cpu_count() or 2
        for _ in range(self.attempts):
            result = self.measure_once(workload, target, server, concurrency, requests)
            if best is None or result.other_cores < best.other_cores:
                best = result
            if result.other_cores <= NOISY_CORES or result.machine_cores < cores - CONTENDED_IDLE_CORES:
                break
            print(f"         other programs took {result.other_cores:.2f} cores: measuring again", flush=True)
        assert best is not None
        return best

    def measure_once(
        self, workload: Workload, target: str, server: Server, concurrency: int, requests: int
    ) -> Measurement:
        # Paced streams all last about as long: spread their starts over one stream, or they go in waves.
        ramp = workload.ideal_e2e_ms / 1000 if workload.tokens_per_s else 0.0
        run = self.loadgen.prepare(
            server.chat_url, workload.body(), concurrency, requests, self.plan.time_limit_s, ramp_s=ramp
        )
        result = measured(run, workload, target, concurrency, self.fake, server, self.loadgen)
        print(progress_line(result), flush=True)
        return result

    def closed_loop(self, names: list[str], runs: list[tuple[Workload, int, int]]) -> list[Measurement]:
        """Each (workload, concurrency, request cap) against every target in turn, direct first (the
        client's own ceiling)."""
        rows = []
        with self.targets(names) as servers:
            for workload, concurrency, requests in runs:
                for name, server in servers.items():
                    rows.append(self.measure(workload, name, server, concurrency, requests))
        return rows

    def memory(self, names: list[str]) -> list[MemoryFigure]:
        figures = []
        for name in names:
            with self.targets([name]) as servers:
                figures.append(self.hold_streams(name, servers[name], self.plan.memory_streams))
        return figures

    def hold_streams(self, name: str, server: Server, streams: int) -> MemoryFigure:
        """Idle RSS after a little traffic, RSS with ``streams`` slow streams open, RSS after they ended."""
        warm = self.loadgen.prepare(server.chat_url, UNPACED.body(), 8, 400, self.plan.time_limit_s)
        warm.go()
        warm.wait()
        idle = procs.rss_bytes(server.pid)
        run = self.loadgen.prepare(server.chat_url, HOLD.body(), streams, streams, 60.0, warm_up=False)
        run.go()
        open_seen, open_rss = wait_open(run, self.fake, server, streams)
        run.wait()
        after = procs.rss_bytes(server.pid)
        figure = MemoryFigure(name, streams, open_seen, idle, open_rss, after, run.outcome.errors)
        mib = 1024 * 1024
        print(
            f"memory   {name:14} {open_seen} streams open: idle {idle / mib:.1f} MiB, open {open_rss / mib:.1f} MiB, "
            f"after {after / mib:.1f} MiB: {figure.per_stream / 1024:.1f} KiB/stream",
            flush=True,
        )
        return figure


def wait_open(run: Run, fake: Server, server: Server, streams: int, timeout: float = 30.0) -> tuple[int, int]:
    """Once the fake holds ``streams`` streams open (or the timeout passed), the proxy's largest RSS
    read every half second for as long as they all stay open (they fill in as tokens arrive)."""
    deadline = time.monotonic() + timeout
    seen = procs.fake_open_streams(fake)
    while seen < streams and time.monotonic() < deadline and not run.wait(0.2):
        seen = procs.fake_open_streams(fake)
    largest = procs.rss_bytes(server.pid)
    while not run.wait(0.5) and procs.fake_open_streams(fake) >= seen:
        largest = max(largest, procs.rss_bytes(server.pid))
    return seen, largest


def progress_line(m: Measurement) -> str:
    cpu = "" if m.proxy_cpu_ms is None else f" proxy {m.proxy_cpu_ms:.2f} ms/req"
    errors = f" ({m.errors} failed: {m.error_kinds})" if m.errors else ""
    return (
        f"{m.workload:8} {m.target:14} c={m.concurrency:<4} {m.ok:6} ok {m.rate:7.0f} req/s "
        f"ttft p50 {m.ttft_p50:7.1f} p99 {m.ttft_p99:7.1f} e2e p50 {m.e2e_p50:7.1f} p99 {m.e2e_p99:7.1f} ms"
        f"{cpu}, machine {m.machine_cores:.2f} cores ({m.other_cores:.2f} other){errors}"
    )
