"""The gateway against the bare passthrough, as ratios within one run: interleaved rounds, medians.

Why this shape: the machine is shared and noisy, so a figure from one run says little on its
own. Every point runs its targets one after the other, in a rotated order each round, for
several rounds; what is reported is the median over rounds of each round's *ratio* (gateway ÷
passthrough, taken from runs seconds apart), so a load from other programs that comes and goes
moves both sides of a ratio alike. Each proxy is pinned to its own core and the fake provider,
the load generator (and Redis) to the other, as in the issue's measurement.

Points (the issue's targets):

- ``stream-c1``: unpaced 32-token streams at concurrency 1: proxy CPU per request, and the added
  first-token time (target's TTFT minus direct's, p50 and p99, per round);
- ``stream-c64``: the same at concurrency 64, also with ``backend = "redis"`` (``gateway-redis``);
- ``full-c64``: non-streamed answers at concurrency 64;
- ``paced-c1000``: paced streams (first token 50 ms, 100 tokens/s) at 1,000 open streams: added
  first-token p99;
- ``memory``: RSS per open stream with 1,000 slow streams open.

``--base REF`` adds ``base``, the gateway at an older commit (a ``git worktree`` of it), to every
point the gateway is in: the A/B measure of one change.

    python -m benchmarks.overhead                                   # every point, ~10 min
    python -m benchmarks.overhead --only stream-c64 --base HEAD~1   # one change's gain
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks import procs
from benchmarks.figures import Measurement, Workload, utc_minute
from benchmarks.loadgen import LoadGenerator
from benchmarks.overhead_sweep import HOLD, PACED, UNPACED, Bench, Plan, measured
from benchmarks.procs import Server
from gateway import native

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROXY_CORE = 1
REST_CORE = 0
NOTES_HEADING = "## Notes"
"""Everything from this heading on in an existing results file is kept when the file is written again."""


@dataclass(frozen=True)
class Point:
    key: str
    title: str
    workload: Workload
    stream: bool
    concurrency: int
    requests: int
    """Per round and target; each run is also capped at ``TIME_LIMIT_S``."""
    targets: tuple[str, ...]
    pinned: bool = True
    """False: the scheduler places the processes. A thousand paced streams need more than the one core
    the fake and the load generator get when pinned (going direct queued for seconds, and the
    gateway's circuit opened on the fake's refusals)."""


POINTS = (
    Point("stream-c1", "streamed, c=1", UNPACED, True, 1, 2000, ("direct", "passthrough", "gateway")),
    Point("stream-c64", "streamed, c=64", UNPACED, True, 64, 4000, ("passthrough", "gateway", "gateway-redis")),
    Point("full-c64", "non-streamed, c=64", UNPACED, False, 64, 4000, ("passthrough", "gateway")),
    Point(
        "paced-c1000",
        "paced, 1,000 open streams",
        PACED,
        True,
        1000,
        4000,
        ("direct", "passthrough", "gateway"),
        pinned=False,
    ),
)
POINT_KEYS = (*(p.key for p in POINTS), "memory")
TIME_LIMIT_S = 30.0
MEMORY_STREAMS = 1000


def body(workload: Workload, stream: bool) -> bytes:
    raw = workload.body()
    return raw if stream else raw.replace(b'"stream": true', b'"stream": false')


def redis_variant(config_text: str, url: str) -> str:
    return config_text.replace('backend = "memory"', f'backend = "redis"\nredis_url = "{url}"')


def pin(pids: list[int], core: int) -> None:
    if (os.cpu_count() or 1) < 2:
        return
    for pid in pids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {core})


@contextlib.contextmanager
def base_checkout(ref: str, *, compiled: bool = False) -> Iterator[Path]:
    """A detached ``git worktree`` of ``ref`` in a scratch folder, removed afterwards; with ``compiled``, its
    optional compiled modules built too (``make native``), so that an A/B of a compiled checkout compares like with
    like."""
    folder = Path(tempfile.mkdtemp(prefix="overhead-base-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), ref], check=True)
    try:
        if compiled:
            env = {**os.environ, "PYTHONPATH": str(folder)}
            subprocess.run([sys.executable, "-m", "gateway.native_build"], cwd=folder, env=env, check=True)
        yield folder
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=False)


@dataclass
class PointResult:
    key: str
    title: str
    concurrency: int
    rounds: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    """Per round, per target: the measurement's figures (asdict of ``Measurement``)."""

    def values(self, target: str, name: str) -> list[float]:
        return [r[target][name] for r in self.rounds if target in r and r[target][name] is not None]

    def ratios(self, target: str, against: str = "passthrough", name: str = "proxy_cpu_ms") -> list[float]:
        out = []
        for r in self.rounds:
            if target in r and against in r and r[target][name] and r[against][name]:
                out.append(r[target][name] / r[against][name])
        return out

    def added(self, target: str, name: str) -> list[float]:
        """Per round, the target's ``name`` minus direct's (the added latency), ms."""
        return [r[target][name] - r["direct"][name] for r in self.rounds if target in r and "direct" in r]


@dataclass
class RatioResults:
    date: str
    machine: str
    command: str
    rounds: int
    base: str | None
    pinned: bool
    quiet_cores: float
    points: list[PointResult] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    routing: str = ""
    """Which routing modules the gateway ran (``gateway.native``): compiled or Python; a base as this checkout."""


FAILED_SHARE = 0.01
"""A point with more failed requests than this gives no latency verdict: its figures are of an overload."""


def failed_share(point: PointResult) -> float:
    failed = sum(int(r[t]["errors"]) for r in point.rounds for t in r)
    done = sum(int(r[t]["ok"]) for r in point.rounds for t in r)
    return failed / max(1, failed + done)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class RatioBench:
    def __init__(self, folder: Path, loadgen: LoadGenerator, fake: Server, pinned: bool) -> None:
        self.folder = folder
        self.loadgen = loadgen
        self.fake = fake
        self.pinned = pinned
        self.rest: list[int] = []
        """The fake provider, the load generator (and Redis): the processes that are not proxies."""

    def measure(self, point: Point, target: str, server: Server) -> Measurement:
        workload = point.workload
        ramp = workload.ideal_e2e_ms / 1000 if workload.tokens_per_s else 0.0
        run = self.loadgen.prepare(
            server.chat_url,
            body(workload, point.stream),
            point.concurrency,
            point.requests,
            TIME_LIMIT_S,
            ramp_s=ramp,
            stream=point.stream,
        )
        m = measured(run, workload, target, point.concurrency, self.fake, server, self.loadgen)
        cpu = "" if m.proxy_cpu_ms is None else f" proxy {m.proxy_cpu_ms:.3f} ms/req"
        errors = f" ({m.errors} failed: {m.error_kinds} {m.error_samples[:1]})" if m.errors else ""
        print(
            f"{point.key:12} {target:14} {m.ok:6} ok {m.rate:6.0f} req/s ttft p50 {m.ttft_p50:6.2f} "
            f"p99 {m.ttft_p99:7.2f} ms{cpu}, other {m.other_cores:.2f} cores{errors}",
            flush=True,
        )
        return m


@contextlib.contextmanager
def servers(
    names: set[str], bench: RatioBench, config_text: str, base: Path | None, scratch: Path, here: Path | None = None
) -> Iterator[dict[str, Server]]:
    with contextlib.ExitStack() as stack:
        out: dict[str, Server] = {"direct": bench.fake}
        if "passthrough" in names:
            out["passthrough"] = stack.enter_context(procs.passthrough(bench.fake, scratch))
        if "gateway" in names:
            out["gateway"] = stack.enter_context(procs.gateway(config_text, "gateway", scratch, source=here))
        if "base" in names and base is not None:
            out["base"] = stack.enter_context(procs.gateway(config_text, "base", scratch, source=base))
        rest = [bench.fake.pid, *bench.loadgen.pids]
        if "gateway-redis" in names:
            from tests.redis_server import RedisServer

            redis = RedisServer(scratch / "redis").start()
            stack.callback(redis.stop)
            assert redis.process is not None
            rest.append(redis.process.pid)
            variant = redis_variant(config_text, redis.url)
            out["gateway-redis"] = stack.enter_context(procs.gateway(variant, "gateway-redis", scratch))
        bench.rest = rest
        pin_all(out, bench, bench.pinned)
        yield out


def pin_all(running: dict[str, Server], bench: RatioBench, pinned: bool) -> None:
    """Each proxy on ``PROXY_CORE``, the rest on ``REST_CORE``; or every process on every core."""
    every = set(range(os.cpu_count() or 1))
    proxies = [s.pid for name, s in running.items() if name != "direct"]
    if pinned:
        pin(bench.rest, REST_CORE)
        pin(proxies, PROXY_CORE)
    else:
        for pid in [*bench.rest, *proxies]:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, every)


def run_ratios(
    keys: list[str],
    rounds: int,
    config_text: str,
    base_ref: str | None,
    clients: int,
    pinned: bool,
    command: str,
    quiet: float,
    scale: float = 1.0,
    at_ref: str | None = None,
    ab_only: bool = False,
    output: Path | None = None,
) -> RatioResults:
    """Run the points ``keys`` (their request counts times ``scale``) for ``rounds`` interleaved rounds.

    ``at_ref``: run ``gateway`` from a worktree of that commit instead of this checkout (so that
    edits made while it runs change nothing); ``ab_only``: only ``gateway`` and ``base``. With
    ``output``, the report is written after every point, so a later failure loses nothing measured."""
    results = RatioResults(utc_minute(), procs.machine(), command, rounds, base_ref, pinned, quiet)
    # A worktree made for a run (``--at``, the base) is built as this checkout is: compiled where it is.
    compiled = native.stale() is None
    results.routing = native.describe() + (" (the base's and --at's built alike)" if base_ref or at_ref else "")
    points = [replace(p, requests=max(p.concurrency, int(p.requests * scale))) for p in POINTS if p.key in keys]
    loadgen = LoadGenerator(clients)
    try:
        with contextlib.ExitStack() as stack:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ratios-")))
            fake = stack.enter_context(procs.fake_provider(scratch))
            config = config_text.replace("{fake_base_url}", fake.base_url)
            base = stack.enter_context(base_checkout(base_ref, compiled=compiled)) if base_ref else None
            here = stack.enter_context(base_checkout(at_ref, compiled=compiled)) if at_ref else None
            bench = RatioBench(scratch, loadgen, fake, pinned)
            if ab_only:
                points = [replace(p, targets=("gateway",)) for p in points]
            wanted = {t for p in points for t in targets_of(p, base is not None)}
            with servers(wanted, bench, config, base, scratch, here) as running:
                for point in points:
                    result = PointResult(point.key, point.title, point.concurrency)
                    results.points.append(result)
                    names = targets_of(point, base is not None)
                    if pinned:
                        pin_all(running, bench, point.pinned)
                    for index in range(rounds):
                        order = names[index % len(names) :] + names[: index % len(names)]
                        row = {name: asdict(bench.measure(point, name, running[name])) for name in order}
                        result.rounds.append(row)
                    if output is not None:
                        write_ratios(results, output)
            if "memory" in keys:
                try:
                    results.memory = hold_memory(bench, config, base, scratch)
                except (OSError, RuntimeError) as exc:
                    # An overloaded fake may not answer its state query in time: keep what was measured.
                    print(f"memory   failed: {exc!r}", flush=True)
    finally:
        loadgen.close()
    if output is not None:
        write_ratios(results, output)
    return results


def targets_of(point: Point, with_base: bool) -> list[str]:
    names = list(point.targets)
    if with_base and "gateway" in names:
        names.insert(names.index("gateway") + 1, "base")
    return names


def hold_memory(bench: RatioBench, config: str, base: Path | None, scratch: Path) -> list[dict[str, Any]]:
    """RSS per open stream of each proxy (one at a time, alone on its core), ``MEMORY_STREAMS`` held open."""
    plan = Plan((), (), (), MEMORY_STREAMS, TIME_LIMIT_S)
    old = Bench(scratch, bench.fake, bench.loadgen, config, plan, attempts=1)
    figures = []
    names = ["passthrough", "gateway"] + (["base"] if base is not None else [])
    for name in names:
        with servers({name}, bench, config, base, scratch) as running:
            pin_all(running, bench, False)  # a thousand streams: every core for the fake and the client
            figure = old.hold_streams(name, running[name], MEMORY_STREAMS)
            figures.append({**asdict(figure), "per_stream": figure.per_stream})
    return figures


# -- the report -------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def spread_text(values: list[float], digits: int = 2) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return fmt(values[0], digits)
    return f"{fmt(median(values), digits)} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def verdict(value: float | None, limit: float) -> str:
    return "–" if value is None else ("yes" if value <= limit else "**no**")


def render_ratios(results: RatioResults, previous: str | None = None) -> str:
    by = {p.key: p for p in results.points}
    lines = [
        "# Gateway overhead against the bare passthrough (issue 20)",
        "",
        f"Measured {results.date} on {results.machine}.",
        "",
        f"Command: `{results.command}`. {results.rounds} interleaved rounds per point (targets in a rotated "
        "order each round); each figure is the median over rounds, with the range in brackets; a ratio is "
        "taken within each round, then its median. "
        + (
            f"Each proxy pinned to core {PROXY_CORE}, the fake provider, the load generator and Redis to core "
            f"{REST_CORE} (not for the 1,000 paced streams and the memory figure: those need both cores for the "
            "fake and the client). "
            if results.pinned
            else ""
        )
        + f"Machine busy before the run: {results.quiet_cores:.2f} cores (shared with other programs).",
        "",
        "*CPU* is the proxy process's CPU time (user + system, /proc) over the run ÷ answers completed. "
        "*Added TTFT* is the target's client-observed time to first token minus going direct's, in the same "
        "round. Passthrough: `benchmarks/passthrough.py` (Starlette + uvicorn + uvloop/httptools + aiohttp, "
        "bytes only). Gateway: `python -m gateway serve -c benchmarks/gateway.bench.toml` (stats in memory, "
        'metrics and access log on); gateway-redis: the same with `backend = "redis"` on a local redis-server.'
        + (f" The gateway's routing modules: {results.routing}." if results.routing else ""),
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]

    def cpu_row(key: str, target: str, limit: float, label: str) -> None:
        point = by.get(key)
        if point is None:
            return
        ratios = point.ratios(target)
        gw, pt = median(point.values(target, "proxy_cpu_ms")), median(point.values("passthrough", "proxy_cpu_ms"))
        lines.append(
            f"| {label} ≤ {limit}× passthrough | {fmt(gw, 3)} vs {fmt(pt, 3)} ms: **{spread_text(ratios)}×** "
            f"| {verdict(median(ratios), limit)} |"
        )

    cpu_row("stream-c1", "gateway", 1.3, "CPU per streamed request, c=1,")
    cpu_row("stream-c64", "gateway", 1.3, "CPU per streamed request, c=64,")
    cpu_row("full-c64", "gateway", 1.3, "CPU per non-streamed request, c=64,")
    cpu_row("stream-c64", "gateway-redis", 1.4, 'CPU per streamed request, c=64, `backend = "redis"`,')
    point = by.get("stream-c1")
    if point is not None:
        for q, limit in (("ttft_p50", 0.2), ("ttft_p99", 1.0)):
            gw, pt = point.added("gateway", q), point.added("passthrough", q)
            diff = [g - p for g, p in zip(gw, pt, strict=False)]
            lines.append(
                f"| added TTFT {q[-3:]} at c=1 ≤ passthrough's + {limit} ms | gateway +{spread_text(gw)} ms, "
                f"passthrough +{spread_text(pt)} ms: **+{spread_text(diff)} ms** | {verdict(median(diff), limit)} |"
            )
    point = by.get("paced-c1000")
    if point is not None and failed_share(point) > FAILED_SHARE:
        lines.append(
            "| paced, 1,000 open streams: added TTFT p99 ≤ 2× passthrough's | not measured: "
            f"{failed_share(point):.0%} of the requests failed (the machine could not carry the load) | – |"
        )
    elif point is not None:
        gw, pt = point.added("gateway", "ttft_p99"), point.added("passthrough", "ttft_p99")
        gm, pm = median(gw), median(pt)
        ratio = None if gm is None or not pm else gm / pm
        met = "–" if gm is None or pm is None else ("yes" if gm <= 2 * max(pm, 0.0) else "**no**")
        lines.append(
            f"| paced, 1,000 open streams: added TTFT p99 ≤ 2× passthrough's | gateway +{spread_text(gw, 1)} ms, "
            f"passthrough +{spread_text(pt, 1)} ms: **{fmt(ratio)}×** | {met} |"
        )
    mem = {m["target"]: m for m in results.memory}
    if "gateway" in mem and "passthrough" in mem:
        g, p = mem["gateway"]["per_stream"], mem["passthrough"]["per_stream"]
        lines.append(
            f"| memory per open stream ≤ 1.2× passthrough's ({MEMORY_STREAMS} streams) | {g / 1024:.1f} vs "
            f"{p / 1024:.1f} KiB: **{g / p:.2f}×** | {verdict(g / p, 1.2)} |"
        )
    if results.base:
        lines += ["", f"## A/B: this version (gateway) against `{results.base}` (base)", ""]
        lines += ["| point | CPU ms/req gateway | base | gateway ÷ base |", "|---|---|---|---|"]
        for point in results.points:
            ratios = point.ratios("gateway", "base")
            if ratios:
                lines.append(
                    f"| {point.title} | {spread_text(point.values('gateway', 'proxy_cpu_ms'), 3)} "
                    f"| {spread_text(point.values('base', 'proxy_cpu_ms'), 3)} | **{spread_text(ratios, 3)}** |"
                )
    lines += ["", "## Every point", ""]
    lines += [
        "| point | target | answers/round | req/s | proxy CPU ms/req | × passthrough | TTFT p50 | TTFT p99 "
        "| added TTFT p50 | added TTFT p99 | other cores | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for point in results.points:
        names = list(dict.fromkeys(name for r in point.rounds for name in r))
        for name in names:
            has_direct = all("direct" in r for r in point.rounds)
            lines.append(
                "| "
                + " | ".join(
                    [
                        point.title,
                        name,
                        fmt(median(point.values(name, "ok")), 0),
                        fmt(median(point.values(name, "rate")), 0),
                        spread_text(point.values(name, "proxy_cpu_ms"), 3),
                        spread_text(point.ratios(name)) if name not in ("direct", "passthrough") else "–",
                        fmt(median(point.values(name, "ttft_p50"))),
                        fmt(median(point.values(name, "ttft_p99"))),
                        spread_text(point.added(name, "ttft_p50")) if has_direct and name != "direct" else "–",
                        spread_text(point.added(name, "ttft_p99")) if has_direct and name != "direct" else "–",
                        fmt(median(point.values(name, "other_cores"))),
                        str(sum(int(v) for v in point.values(name, "errors"))),
                    ]
                )
                + " |"
            )
    if results.memory:
        lines += ["", f"Memory, {MEMORY_STREAMS} slow streams ({HOLD.describe()}) held open:", ""]
        lines += ["| target | open | idle RSS MiB | open RSS MiB | KiB per stream |", "|---|---|---|---|---|"]
        mib = 1024 * 1024
        for m in results.memory:
            lines.append(
                f"| {m['target']} | {m['open_seen']} | {m['idle_rss'] / mib:.1f} | {m['open_rss'] / mib:.1f} "
                f"| {m['per_stream'] / 1024:.1f} |"
            )
    text = "\n".join(lines) + "\n"
    if previous and NOTES_HEADING in previous:
        text += "\n" + previous[previous.index(NOTES_HEADING) :]
    return text


def write_ratios(results: RatioResults, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    previous = output.read_text() if output.exists() else None
    output.with_suffix(".json").write_text(json.dumps(asdict(results), indent=1) + "\n")
    output.write_text(render_ratios(results, previous))
    print(f"\nwritten to {output} (and {output.with_suffix('.json').name})")
