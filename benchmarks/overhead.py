"""What the gateway adds, against going direct and against a bare passthrough of the same stack.

By default: the issue's ratios (``benchmarks/overhead_ratios.py``): CPU per request and added
first-token time of the gateway against the passthrough, in interleaved rounds with medians,
written to ``benchmarks/results/overhead.md``. ``--only unpaced,paced,spread,memory`` runs the
detailed sweep below instead (``results/overhead-sweep.md``).

The sweep starts one fake provider, the bare passthrough (``benchmarks/passthrough.py``)
and the full gateway (``python -m gateway serve``, stats in memory, metrics and access log on),
each its own process, and drives streamed chat requests at them from the same client
(``benchmarks/loadgen.py``):

- unpaced: 32-token answers as fast as the fake can send them, at concurrency 1, 16, 64 and
  256: requests/s, added TTFT and end-to-end, CPU per request of the proxy (also through the
  gateway with its access log off);
- paced: TTFT 50 ms, 100 tokens/s, 32 tokens, at 1, 64, 256 and 1,000 concurrent streams:
  added TTFT and end-to-end, which should not grow with concurrency;
- memory: RSS of each proxy with 1,000 slow streams held open, minus its idle RSS;
- ``--profile``: py-spy on the gateway during an unpaced run at concurrency 64;
- ``--soak SECONDS``: paced traffic through the gateway for that long, its RSS every 10 s.

See ``benchmarks/README.md``.

    python -m benchmarks.overhead             # the ratios, about 10 minutes
    python -m benchmarks.overhead --only stream-c64 --base HEAD~1 --rounds 5   # one change, A/B
    python -m benchmarks.overhead --only unpaced,paced,spread,memory          # the sweep, several minutes
    python -m benchmarks.overhead --quick     # a smoke run of the sweep, about a minute
    python -m benchmarks.overhead --soak      # a 10-minute soak
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import procs
from benchmarks.figures import Measurement, MemoryFigure, Results, Workload, utc_minute
from benchmarks.loadgen import LoadGenerator, Run
from benchmarks.overhead_ratios import POINT_KEYS, measured, run_ratios
from benchmarks.overhead_report import render
from benchmarks.procs import MachineCpu, Server

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_CONFIG = HERE / "gateway.bench.toml"
UNPACED = Workload("unpaced", ttft_s=0.0, tokens_per_s=0.0, tokens=32)
PACED = Workload("paced", ttft_s=0.05, tokens_per_s=100.0, tokens=32)
SPREAD_RATE = 170.0
"""Requests/s of the constant-rate paced runs: what 64 paced streams ask for, well within the machine."""
HOLD = Workload("hold", ttft_s=0.0, tokens_per_s=4.0, tokens=48)
"""Slow streams for the memory figure: each stays open about 12 s."""
TARGETS = ("direct", "passthrough", "gateway", "gateway-nolog")
NOISY_CORES = 0.2
CONTENDED_IDLE_CORES = 0.4
"""A run is measured again when other programs took more than ``NOISY_CORES`` while the machine had
less than ``CONTENDED_IDLE_CORES`` idle: then they took CPU the benchmark's processes wanted."""
STEPS = ("unpaced", "paced", "spread", "memory", "profile")


def spread(concurrency: int) -> Workload:
    """Paced streams slowed so that ``concurrency`` of them ask for ``SPREAD_RATE`` requests/s: the
    load stays the same while the number of open streams grows."""
    stream_s = concurrency / SPREAD_RATE
    return Workload("spread", PACED.ttft_s, (PACED.tokens - 1) / (stream_s - PACED.ttft_s), PACED.tokens)


@dataclass(frozen=True)
class Plan:
    """How much of each workload to run: (concurrency, request cap) pairs, each run also time-capped."""

    unpaced: tuple[tuple[int, int], ...]
    paced: tuple[tuple[int, int], ...]
    spread: tuple[tuple[int, int], ...]
    memory_streams: int
    time_limit_s: float


FULL = Plan(
    unpaced=((1, 3000), (16, 8000), (64, 8000), (256, 8000)),
    paced=((1, 120), (64, 1500), (256, 3000), (1000, 5000)),
    spread=((64, 1000), (256, 1500), (1000, 3000)),
    memory_streams=1000,
    time_limit_s=45.0,
)
QUICK = Plan(
    unpaced=((1, 300), (64, 1500)),
    paced=((1, 8), (64, 300)),
    spread=((64, 200), (256, 300)),
    memory_streams=200,
    time_limit_s=8.0,
)


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


def quiet_machine(wait_s: float) -> float:
    """Cores busy over 2 s; with ``wait_s`` > 0, keep looking (up to that long) for a quiet moment."""
    deadline = time.monotonic() + wait_s
    while True:
        before = MachineCpu.read()
        time.sleep(2.0)
        used = MachineCpu.read().since(before)
        cores = used.busy / 2.0
        if cores < 0.1 or time.monotonic() >= deadline:
            return cores
        print(f"machine busy ({cores:.2f} cores): waiting for a quiet moment", flush=True)


def raise_file_limit() -> None:
    """1,000 streams through a proxy take 2,000 sockets in it; children inherit the raised limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 16384:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (min(16384, hard) if hard != resource.RLIM_INFINITY else 16384, hard)
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument(
        "--only",
        help=f"comma-separated points among {', '.join(POINT_KEYS)} (the issue's ratios, the default: all of "
        f"them), or steps of the detailed sweep among {', '.join(STEPS)}",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per ratio point (default: 3)")
    parser.add_argument("--base", metavar="REF", help="also run the gateway at git REF (A/B of a change)")
    parser.add_argument("--scale", type=float, help="ratio points: requests per run times this (--quick: 0.1)")
    parser.add_argument("--at", metavar="REF", help="run the gateway at git REF instead of this checkout")
    parser.add_argument("--ab-only", action="store_true", help="with --base: only the gateway and the base")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the proxies to their own core")
    parser.add_argument("--target", help=f"comma-separated targets among {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--gateway-config", type=Path, default=DEFAULT_CONFIG, help="a variant of gateway.bench.toml")
    parser.add_argument("--output", type=Path, help="the Markdown report (default: results/overhead.md)")
    parser.add_argument("--profile", action="store_true", help="also record the gateway with py-spy (unpaced, c=64)")
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes (default: 2)")
    parser.add_argument(
        "--attempts", type=int, default=3, help=f"runs per figure while others use > {NOISY_CORES} cores (3)"
    )
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S", help="wait up to S s for an idle machine")
    parser.add_argument(
        "--soak", type=float, nargs="?", const=600.0, metavar="S", help="only a soak of S seconds (default 600)"
    )
    parser.add_argument("--soak-concurrency", type=int, default=128, help="paced streams during the soak")
    args = parser.parse_args(argv)
    steps = (args.only or ",".join(POINT_KEYS)).split(",")
    # "memory" is both: a ratio point beside other ratio points, else the sweep's step.
    ratio_points = any(step in POINT_KEYS and step not in STEPS for step in steps)
    args.ratios = [step for step in steps if step in POINT_KEYS and (ratio_points or step not in STEPS)]
    steps = [step for step in steps if step not in args.ratios]
    if args.profile:
        steps.append("profile")
    args.targets = (args.target or ",".join(TARGETS)).split(",")
    for kind, given, known in (("step", steps, STEPS), ("target", args.targets, TARGETS)):
        unknown = [name for name in given if name not in known]
        if unknown:
            parser.error(f"unknown {kind}: {', '.join(unknown)} (known: {', '.join(known)})")
    args.steps = list(dict.fromkeys(steps))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    raise_file_limit()
    command = "python -m benchmarks.overhead" + "".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:]))
    config_text = args.gateway_config.read_text()
    if "{fake_base_url}" not in config_text:
        sys.exit(f"{args.gateway_config}: no {{fake_base_url}} placeholder for the fake provider's base_url")
    if args.soak is not None:
        from benchmarks.overhead_soak import run_soak

        run_soak(args.soak, args.soak_concurrency, config_text, args.clients, command, args.output)
        return
    quiet = quiet_machine(args.wait_quiet)
    if args.ratios:
        run_ratios(
            args.ratios,
            args.rounds,
            config_text,
            args.base,
            args.clients,
            not args.no_pin,
            command,
            quiet,
            scale=args.scale or (0.1 if args.quick else 1.0),
            at_ref=args.at,
            ab_only=args.ab_only,
            output=args.output or RESULTS / "overhead.md",
        )
        if not args.steps:
            return
    results = Results(
        date=utc_minute(),
        machine=procs.machine(),
        command=command,
        client_processes=args.clients,
        quiet_cores=quiet,
        attempts=args.attempts,
        noisy_cores=NOISY_CORES,
        contended_idle_cores=CONTENDED_IDLE_CORES,
    )
    plan = QUICK if args.quick else FULL
    output = args.output or RESULTS / ("overhead-quick.md" if args.quick else "overhead-sweep.md")
    if args.ratios and args.output:
        output = output.with_name(output.stem + "-sweep.md")
    loadgen = LoadGenerator(args.clients)
    try:
        with tempfile.TemporaryDirectory(prefix="overhead-") as scratch, procs.fake_provider(Path(scratch)) as fake:
            bench = Bench(Path(scratch), fake, loadgen, config_text, plan, args.attempts)
            if "unpaced" in args.steps:
                results.workloads["unpaced"] = UNPACED.describe()
                runs = [(UNPACED, c, n) for c, n in plan.unpaced]
                results.measurements += bench.closed_loop(args.targets, runs)
            names = [name for name in args.targets if name != "gateway-nolog"]
            if "paced" in args.steps:
                results.workloads["paced"] = PACED.describe()
                results.measurements += bench.closed_loop(names, [(PACED, c, n) for c, n in plan.paced])
            if "spread" in args.steps:
                paces = ", ".join(f"c={c}: {spread(c).tokens_per_s:.3g}" for c, _ in plan.spread)
                results.workloads["spread"] = (
                    f"TTFT 50 ms, 32 tokens, the pace slowed as concurrency grows so that every concurrency asks "
                    f"for {SPREAD_RATE:g} requests/s (tokens/s {paces})"
                )
                results.measurements += bench.closed_loop(names, [(spread(c), c, n) for c, n in plan.spread])
            if "memory" in args.steps:
                results.workloads["hold"] = HOLD.describe()
                names = [name for name in args.targets if name in ("passthrough", "gateway")]
                results.memory += bench.memory(names)
            if "profile" in args.steps:
                from benchmarks.profile import profile_gateway

                with bench.targets(["gateway"]) as servers:
                    results.profile = profile_gateway(
                        servers["gateway"], loadgen, UNPACED.body(), output.parent, plan.time_limit_s
                    )
    finally:
        loadgen.close()
    output.parent.mkdir(parents=True, exist_ok=True)
    results.save(output.with_suffix(".json"))
    output.write_text(render(results, RESULTS / "overhead-soak.json"))
    print(f"\nwritten to {output} (and {output.with_suffix('.json').name})")


if __name__ == "__main__":
    main()
