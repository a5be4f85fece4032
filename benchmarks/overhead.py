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
- ``--profile``: py-spy on the gateway during an unpaced run at concurrency 64 (``--only profile-full``: of
  the same answers not streamed);
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
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import procs
from benchmarks.figures import Results, Workload, utc_minute
from benchmarks.loadgen import LoadGenerator
from benchmarks.overhead_ratios import POINT_KEYS, run_ratios
from benchmarks.overhead_report import render
from benchmarks.overhead_sweep import CONTENDED_IDLE_CORES, HOLD, NOISY_CORES, PACED, UNPACED, Bench, Plan
from benchmarks.procs import MachineCpu

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_CONFIG = HERE / "gateway.bench.toml"
SPREAD_RATE = 170.0
"""Requests/s of the constant-rate paced runs: what 64 paced streams ask for, well within the machine."""
TARGETS = ("direct", "passthrough", "gateway", "gateway-nolog")
STEPS = ("unpaced", "paced", "spread", "memory", "profile", "profile-full")


def spread(concurrency: int) -> Workload:
    """Paced streams slowed so that ``concurrency`` of them ask for ``SPREAD_RATE`` requests/s: the
    load stays the same while the number of open streams grows."""
    stream_s = concurrency / SPREAD_RATE
    return Workload("spread", PACED.ttft_s, (PACED.tokens - 1) / (stream_s - PACED.ttft_s), PACED.tokens)


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
            if "profile" in args.steps or "profile-full" in args.steps:
                from benchmarks.overhead_ratios import body
                from benchmarks.profile import profile_gateway

                with bench.targets(["gateway"]) as servers:
                    results.profile = []
                    for stream in (True, False):
                        if ("profile" if stream else "profile-full") in args.steps:
                            results.profile += profile_gateway(
                                servers["gateway"],
                                loadgen,
                                body(UNPACED, stream),
                                output.parent,
                                plan.time_limit_s,
                                stream,
                            )
    finally:
        loadgen.close()
    output.parent.mkdir(parents=True, exist_ok=True)
    results.save(output.with_suffix(".json"))
    output.write_text(render(results, RESULTS / "overhead-soak.json"))
    print(f"\nwritten to {output} (and {output.with_suffix('.json').name})")


if __name__ == "__main__":
    main()
