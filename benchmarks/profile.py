"""Where the gateway's CPU goes: py-spy on the gateway process during an unpaced run at concurrency 64.

Of streams (``profile``), or of the same answers whole (``profile-full``: ``profile-gateway-full.*``). Two
recordings of the same run shape, one after the other: a flame graph (SVG) to look at, and raw collapsed stacks
from which a text summary is computed, self and inclusive time per function, so that a profile can be read in a
terminal or a diff. py-spy samples from outside the process (200 times a second, idle time excluded), so the
gateway runs unmodified.

    python -m benchmarks.overhead --only profile
    python -m benchmarks.overhead --only profile-full   # non-streamed answers
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.loadgen import LoadGenerator
from benchmarks.procs import Server, stop

CONCURRENCY = 64
REQUESTS = 30000
RATE_HZ = 200
TOP = 30


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if not found:
        sys.exit("py-spy not found: pip install py-spy (it is in the dev extra: pip install -e '.[dev]')")
    return found


def record(
    gateway: Server, loadgen: LoadGenerator, body: bytes, fmt: str, path: Path, time_limit_s: float, stream: bool = True
) -> float:
    """Record the gateway with py-spy in ``fmt`` while one run goes; returns the run's requests/s."""
    run = loadgen.prepare(gateway.chat_url, body, CONCURRENCY, REQUESTS, time_limit_s, stream=stream)
    args = [py_spy(), "record", "--pid", str(gateway.pid), "--format", fmt, "--function", "-o", str(path)]
    args += ["--rate", str(RATE_HZ)]
    spy = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    said = b""
    try:
        # py-spy says when it is attached; the run starts after that, so it is recorded whole.
        assert spy.stderr is not None
        deadline = time.monotonic() + 15
        while b"Sampling process" not in said and spy.poll() is None and time.monotonic() < deadline:
            if select.select([spy.stderr], [], [], max(0.0, deadline - time.monotonic()))[0]:
                said += os.read(spy.stderr.fileno(), 4096)
        run.go()
        run.wait()
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            said += spy.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            stop(spy)
    if not path.exists():
        raise RuntimeError(f"py-spy wrote no {path}: {said.decode(errors='replace')}")
    return run.outcome.rate


FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def short(frame: str) -> str:
    """``function (path:line)`` with the path cut to its package-relative part."""
    match = FRAME.match(frame)
    if not match:
        return frame
    file = match["file"]
    for marker in ("site-packages/", "/gateway/", "/benchmarks/", "/lib/python3"):
        if marker in file:
            cut = file.index(marker) + len(marker)
            file = ("gateway/" if marker == "/gateway/" else "") + file[cut:]
            break
    line = f":{match['line']}" if match["line"] else ""
    return f"{match['function']} ({file}{line})"


IDLE_LEAVES = ("_worker (concurrent/futures/thread.py",)
"""Leaf frames py-spy reports as busy although the thread sleeps: the default executor's thread
waiting on its queue (its /proc CPU time stays at zero under load)."""


def summarise(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """Samples, and samples per function by self and by inclusive time, from collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [short(frame) for frame in stack.split(";")]
        if frames[-1].startswith(IDLE_LEAVES):
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return total, own, inclusive


def summary_text(raw: str, rate: float, stream: bool = True) -> str:
    total, own, inclusive = summarise(raw)
    answers, svg = (
        ("streams", "profile-gateway.svg") if stream else ("answers, not streamed", "profile-gateway-full.svg")
    )
    lines = [
        f"py-spy on the gateway, unpaced 32-token {answers} at concurrency {CONCURRENCY} ({rate:.0f} req/s while "
        f"recorded), {total} samples at {RATE_HZ} Hz, idle excluded (also the executor thread waiting on its queue,",
        f"which py-spy counts as busy). The flame graph ({svg}) is a separate recording of the same run.",
        "Self time of Runner.run is uvloop's own C code (polling, socket reads and writes, callbacks); self time of",
        "RequestResponseCycle.send includes uvicorn's transport.write, a system call per relayed event.",
        "",
    ]
    # The gateway's own functions apart: what its code costs, under the frames every sample shares.
    ours = Counter({name: n for name, n in inclusive.items() if " (gateway/" in name and n < 0.9 * total})
    tables = (
        ("self", own.most_common(TOP)),
        ("inclusive", inclusive.most_common(TOP)),
        ("inclusive, gateway/ functions only", ours.most_common(TOP)),
    )
    for title, entries in tables:
        lines += [f"Top {len(entries)} by {title} time:", "", f"{'%':>6}  {'samples':>7}  function"]
        lines += [f"{100 * n / max(1, total):6.1f}  {n:7}  {name}" for name, n in entries]
        lines.append("")
    return "\n".join(lines)


def profile_gateway(
    gateway: Server, loadgen: LoadGenerator, body: bytes, folder: Path, time_limit_s: float, stream: bool = True
) -> list[str]:
    """Write ``profile-gateway.svg`` and ``profile-gateway.txt`` into ``folder`` (``profile-gateway-full.*`` for
    answers not streamed); returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = "profile-gateway" if stream else "profile-gateway-full"
    svg, text = folder / f"{stem}.svg", folder / f"{stem}.txt"
    raw = folder / f"{stem}.raw.tmp"
    rate = record(gateway, loadgen, body, "flamegraph", svg, time_limit_s, stream)
    print(f"profile  flame graph recorded at {rate:.0f} req/s: {svg}", flush=True)
    rate = record(gateway, loadgen, body, "raw", raw, time_limit_s, stream)
    text.write_text(summary_text(raw.read_text(), rate, stream))
    raw.unlink()
    print(f"profile  summary recorded at {rate:.0f} req/s: {text}", flush=True)
    return [svg.name, text.name]
