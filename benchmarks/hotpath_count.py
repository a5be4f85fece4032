"""Instructions and first-level cache misses per whole request, counted by callgrind: what a noisy machine's clocks
cannot settle.

The in-process app of ``benchmarks.hotpath_stages`` (``running_app(1)``, the bench config, upstreams in memory)
driven under ``valgrind --tool=callgrind --cache-sim=yes`` twice per kind of request, each run warming with the
same requests and then sending ``small`` or ``large`` more: the difference of the two runs' totals, divided by
``large - small``, is one request's own. Callgrind counts only from the end of the warming (``callgrind_control``
turns it on when the run says it is warm): start-up and imports, most of a run's instructions, run uncounted and
several times faster.

What is counted must not depend on how fast the run goes (valgrind's slowdown, a busy machine's share), so the
counted run sees time pass by its own work: ``time.time``, ``time.monotonic`` and ``time.perf_counter`` each advance
``TICK_S`` per read (set before the gateway is imported, so that clocks taken as defaults are these), hashes are
seeded alike, and the access log's batches are written when ``LineWriter.max_lines`` wait (at native speed the
``delay_s`` timer holds a hundred lines or more; under valgrind it would hold one or two, and time each run
differently). Runs of different hours still differ by more than runs made side by side (uvloop's own clock follows
real time; addresses differ from run to run): compare runs started together.

    python -m benchmarks.hotpath_count                      # streamed and non-streamed, 400 - 100 requests
    python -m benchmarks.hotpath_count --kinds streamed --small 100 --large 400

Valgrind must be installed; each run takes minutes. Build the compiled modules first (``gateway.native_build``) to
count what ``gateway serve`` runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import uvloop

EVENTS = ("Ir", "I1mr", "D1mr", "D1mw")
"""What is reported per request: instructions, and first-level instruction, data-read and data-write misses."""
KINDS = {"streamed": True, "non-streamed": False}
TICK_S = 10e-6
"""How far each clock moves per read in a counted run."""


def _ticking(start: float) -> Callable[[], float]:
    now = [start]

    def read() -> float:
        now[0] += TICK_S
        return now[0]

    return read


async def _drive(stream: bool, warm: int, requests: int) -> None:
    from benchmarks.hotpath_memory import Driver, running_app  # the gateway, imported once the clocks tick

    async with running_app(1) as app:
        driver = Driver(app, stream)
        for _ in range(warm):
            await driver.one()
        print("warm", flush=True)  # the parent turns the counting on, then answers
        sys.stdin.readline()
        for _ in range(requests):
            await driver.one()


def _child(stream: bool, warm: int, requests: int) -> None:
    """The run valgrind watches: the access log to a scratch file, as ``hotpath --stages`` writes it."""
    time.time = _ticking(time.time())
    time.monotonic = _ticking(time.monotonic())
    time.perf_counter = _ticking(time.perf_counter())
    from gateway.access_lines import LineWriter
    from gateway.accesslog import configure_access_log

    LineWriter.delay_s = 1e6  # never, in a run: the batches go by count
    with tempfile.TemporaryFile("w") as log_stream:
        configure_access_log(log_stream)
        uvloop.run(_drive(stream, warm, requests))


def counted(stream: bool, warm: int, requests: int) -> dict[str, int]:
    """Callgrind's totals of one run of ``warm`` requests then ``requests``, counted from the end of the warming (and
    the run's exit), by event."""
    with tempfile.TemporaryDirectory(prefix="hotpath-count-") as scratch:
        out = os.path.join(scratch, "callgrind.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--cache-sim=yes",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "benchmarks.hotpath_count",
            "--child",
            "--stream" if stream else "--no-stream",
            "--warm",
            str(warm),
            "--large",
            str(requests),
        ]
        with subprocess.Popen(
            command,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as child:
            assert child.stdin is not None and child.stdout is not None
            if child.stdout.readline().strip() != "warm":
                raise RuntimeError("the counted run ended before it was warm")
            subprocess.run(["callgrind_control", "--instr=on", str(child.pid)], check=True, capture_output=True)
            child.stdin.write("go\n")
            child.stdin.close()
            if child.wait() != 0:
                raise RuntimeError(f"the counted run failed ({child.returncode})")
        names: list[str] = []
        totals: list[int] = []
        with open(out) as lines:
            for line in lines:
                if line.startswith("events:"):
                    names = line.split()[1:]
                elif line.startswith(("summary:", "totals:")):
                    totals = [int(n) for n in line.split()[1:]]
    found = dict(zip(names, totals, strict=True))
    return {event: found[event] for event in EVENTS}


def per_request(stream: bool, warm: int, small: int, large: int) -> dict[str, float]:
    few, many = counted(stream, warm, small), counted(stream, warm, large)
    return {event: (many[event] - few[event]) / (large - small) for event in EVENTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--warm", type=int, default=300, help="requests before those counted, in each run (300)")
    parser.add_argument("--small", type=int, default=100, help="requests of the shorter run (100)")
    parser.add_argument("--large", type=int, default=400, help="requests of the longer run (400)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.stream, args.warm, args.large)
        return
    print("| request | " + " | ".join(EVENTS) + " |")
    print("|---|" + "---|" * len(EVENTS))
    for kind in args.kinds:
        counts = per_request(KINDS[kind], args.warm, args.small, args.large)
        print(f"| {kind} | " + " | ".join(f"{counts[event]:,.0f}" for event in EVENTS) + " |", flush=True)


if __name__ == "__main__":
    main()
