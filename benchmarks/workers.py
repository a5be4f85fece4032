"""Streaming throughput of ``gateway serve`` with 1 and 2 workers, and CPU per request.

Why: ``--workers N`` exists to use a host's cores; this measures what the second worker buys on
this machine and what a request costs in CPU either way. The gateway runs as shipped
(``gateway.bench.toml``: stats in memory, metrics and access log on) in front of the fake provider
(unpaced, 32-token streams), driven by the load generator's processes (``loadgen.py``) in a closed
loop at a fixed concurrency. Every gateway process is counted: the supervisor and each worker
(CPU from ``/proc/<pid>/stat``), and the whole machine's busy time is read around each run.

The machine is shared (other jobs run on it): the configurations are measured in alternation,
``--rounds`` times, and compared as ratios of medians within one invocation.

Usage: ``python -m benchmarks.workers [--rounds 3] [--seconds 12] [--concurrency 64] [--out FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.loadgen import LoadGenerator
from benchmarks.procs import MachineCpu, Server, cpu_seconds, fake_provider, free_port, machine, started

CONFIG = Path(__file__).parent / "gateway.bench.toml"
BODY = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "Say hi"}], "stream": True, "max_tokens": 32}
).encode()


@dataclass
class Round:
    workers: int
    ok: int
    errors: int
    rate: float
    cpu_s: float
    """The gateway's processes (supervisor and workers), over the measured part."""
    machine_busy: float
    """Share of the machine's CPU time that was busy (all processes, this benchmark's and others')."""
    ttft_p50_ms: float
    ttft_p99_ms: float
    per_worker_cpu_s: list[float] = field(default_factory=list)


def gateway_pids(server: Server, workers: int) -> list[int]:
    """The serving processes: the one process, or the supervisor and its workers (from its log)."""
    if workers == 1:
        return [server.pid]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = dict(re.findall(r"worker (\d+) serving \(pid (\d+)\)", server.log_path.read_text(errors="replace")))
        if len(found) == workers:
            return [server.pid, *(int(pid) for _, pid in sorted(found.items()))]
        time.sleep(0.05)
    raise RuntimeError(f"the workers did not all report serving:\n{server.log_path.read_text()[-2000:]}")


@contextlib.contextmanager
def gateway(fake: Server, workers: int, folder: Path) -> Iterator[tuple[Server, list[int]]]:
    port = free_port()
    config = folder / f"gateway-{workers}.toml"
    config.write_text(CONFIG.read_text().replace("{fake_base_url}", fake.base_url))
    env = {k: v for k, v in os.environ.items() if k not in ("GATEWAY_API_KEYS", "GATEWAY_ADMIN_KEY")}
    args = ["-m", "gateway", "serve", "-c", str(config), "--port", str(port), "--log-level", "warning"]
    args += ["--workers", str(workers)]
    with started(f"gateway-{workers}w", args, port, "/healthz", folder, env) as server:
        yield server, gateway_pids(server, workers)


def measure(load: LoadGenerator, url: str, pids: list[int], workers: int, concurrency: int, seconds: float) -> Round:
    run = load.prepare(url, BODY, concurrency, requests=10**7, time_limit_s=seconds)
    cpu_before = [cpu_seconds(pid) for pid in pids]
    machine_before = MachineCpu.read()
    run.go()
    run.wait()
    cpu_after = [cpu_seconds(pid) for pid in pids]
    used = MachineCpu.read().since(machine_before)
    outcome = run.outcome
    ttft = sorted(outcome.ttft_s) or [0.0]
    deltas = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
    return Round(
        workers=workers,
        ok=outcome.ok,
        errors=outcome.errors,
        rate=outcome.rate,
        cpu_s=sum(deltas),
        machine_busy=used.busy / used.total if used.total else 0.0,
        ttft_p50_ms=ttft[len(ttft) // 2] * 1000,
        ttft_p99_ms=ttft[min(len(ttft) - 1, int(len(ttft) * 0.99))] * 1000,
        per_worker_cpu_s=deltas[1:] if workers > 1 else deltas,
    )


def report(rounds: list[Round], args: argparse.Namespace, load_before: str) -> str:
    by_workers: dict[int, list[Round]] = {}
    for r in rounds:
        by_workers.setdefault(r.workers, []).append(r)

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    rate = {w: median([r.rate for r in rs]) for w, rs in by_workers.items()}
    cpu_ms = {w: median([r.cpu_s / r.ok * 1000 for r in rs if r.ok]) for w, rs in by_workers.items()}
    lines = [
        "# Streaming throughput with 1 and 2 workers",
        "",
        f"Measured {datetime.date.today().isoformat()} on {machine()}.",
        f"The machine is shared with other jobs ({load_before}): the configurations ran in alternation,",
        f"{args.rounds} rounds of {args.seconds:g} s each, and are compared as ratios of their medians.",
        "",
        f"Command: `python -m benchmarks.workers --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--concurrency {args.concurrency} --clients {args.clients}`. The gateway as shipped",
        "(`benchmarks/gateway.bench.toml`: stats in memory, metrics and access log on) in front of the",
        "fake provider (unpaced 32-token streams); the load generator and the fake run on the same cores.",
        "",
        "| workers | req/s (median) | CPU ms per request, all gateway processes (median) | vs 1 worker: req/s "
        "| CPU/request |",
        "|---|---|---|---|---|",
    ]
    for w in sorted(by_workers):
        lines.append(
            f"| {w} | {rate[w]:.0f} | {cpu_ms[w]:.2f} | ×{rate[w] / rate[1]:.2f} | ×{cpu_ms[w] / cpu_ms[1]:.2f} |"
        )
    lines += [
        "",
        "Every round:",
        "",
        "| round | workers | answers | errors | req/s | gateway CPU s | per worker CPU s | machine busy | "
        "TTFT p50 ms | TTFT p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, r in enumerate(rounds):
        per_worker = " / ".join(f"{c:.1f}" for c in r.per_worker_cpu_s)
        lines.append(
            f"| {index // len(by_workers) + 1} | {r.workers} | {r.ok} | {r.errors} | {r.rate:.0f} | {r.cpu_s:.1f} | "
            f"{per_worker} | {r.machine_busy:.0%} | {r.ttft_p50_ms:.1f} | {r.ttft_p99_ms:.1f} |"
        )
    lines += [
        "",
        "How to read it: on a 2-core machine the client and the fake provider need most of a core",
        "themselves, so a second worker can only take what they leave; *machine busy* near 100% means",
        "the cores, not the gateway, set the rate, and on a machine other jobs also load, two worker",
        "processes also win a larger share of the scheduler's time than one: part of the gain is that.",
        "CPU per request is what to compare across configurations: what a second worker costs in",
        "overhead (shared nothing but the port, so close to none). The per-worker CPU shows how evenly",
        "the kernel spread the connections (`SO_REUSEPORT`).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "workers.md")
    args = parser.parse_args()
    one, five, _ = os.getloadavg()
    load_before = f"load average {one:.2f} / {five:.2f} at the start on {os.cpu_count()} CPUs"
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory() as workdir:
        folder = Path(workdir)
        load = LoadGenerator(args.clients)
        try:
            with fake_provider(folder) as fake:
                for index in range(args.rounds):
                    for workers in (1, 2) if index % 2 == 0 else (2, 1):
                        with gateway(fake, workers, folder) as (server, pids):
                            r = measure(load, server.chat_url, pids, workers, args.concurrency, args.seconds)
                        rounds.append(r)
                        print(
                            f"round {index + 1}, {workers} worker(s): {r.rate:.0f} req/s, "
                            f"{r.cpu_s / max(1, r.ok) * 1000:.2f} ms CPU/request, machine {r.machine_busy:.0%}",
                            flush=True,
                        )
        finally:
            load.close()
    text = report(rounds, args, load_before)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
