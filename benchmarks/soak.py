"""Soak: thousands of streamed requests through two gateway replicas on one Redis, while Redis is
restarted and the busiest provider is killed.

What it proves: a request that had a healthy alternative is never lost (every answer arrives
whole: the exact expected text, one ``[DONE]``, no error event), and a replica's memory stays
flat. Everything runs as separate processes on loopback: a ``redis-server`` of its own on a free
port, three fake providers and two replicas (``python -m gateway fake-provider`` / ``serve``),
and this process as the client (aiohttp on uvloop), which sends each request to the two replicas
in turn. Every deployment is marked ``continue_prefill``, so the streams the killed provider
was in the middle of are finished by another one (mid-stream recovery).

The run is bounded in requests and in time. Events fire on progress (share of requests done):
Redis is killed (SIGKILL) and started again, empty, on the same port a few seconds later; then
the provider with the most traffic is killed for good. Results go to
``benchmarks/results/soak.md``.

    python -m benchmarks.soak                 # the recorded run (about three minutes)
    python -m benchmarks.soak --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.overhead import free_port, machine, quantile
from gateway.fakes.provider import answer_words
from gateway.sse import SSESplitter
from tests.redis_server import RedisServer

RESULTS = Path(__file__).resolve().parent / "results" / "soak.md"
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
class Outcome:
    """One client request, as the client saw it."""

    started: float
    ended: float
    replica: int
    ok: bool
    ttft_s: float | None
    provider: str
    failure: str = ""


@dataclass
class Timeline:
    """What happened when, in seconds from the start of the load."""

    origin: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.origin

    def note(self, what: str) -> None:
        at = self.now()
        self.events.append((at, what))
        print(f"[{at:7.2f}s] {what}", flush=True)


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


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SOAK_CLIENT_KEYS": CLIENT_KEY, "SOAK_ADMIN_KEY": "soak-admin-key"}
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", *args], stdout=subprocess.DEVNULL, stderr=sink, env=env
        )


def stop(process: subprocess.Popen[bytes], how: signal.Signals = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(how)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def fleet_up(workdir: Path) -> Iterator[Fleet]:
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
            fleet.replicas.append(spawn(["serve", "-c", str(config)], workdir / f"replica-{index}.log"))
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


async def one_request(session: aiohttp.ClientSession, url: str, replica: int, timeline: Timeline) -> Outcome:
    """One streamed request; ok only if the whole expected answer arrived, once, and ended with one [DONE]."""
    started = timeline.now()
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    ttft: float | None = None
    provider = ""
    try:
        async with session.post(url, json=BODY, headers=headers) as response:
            provider = response.headers.get("x-gateway-provider", "")
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")[:200]
                return Outcome(
                    started, timeline.now(), replica, False, None, provider, f"HTTP {response.status}: {text}"
                )
            splitter = SSESplitter()
            text_parts: list[str] = []
            done = roles = 0
            error = ""
            async for chunk in response.content.iter_any():
                for data in splitter.feed(chunk):
                    if data == b"[DONE]":
                        done += 1
                        continue
                    event = json.loads(data)
                    if "error" in event:
                        error = str(event["error"].get("message"))[:200]
                        continue
                    for choice in event.get("choices", []):
                        delta = choice.get("delta", {})
                        roles += "role" in delta
                        if delta.get("content"):
                            if ttft is None:
                                ttft = timeline.now() - started
                            text_parts.append(delta["content"])
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return Outcome(started, timeline.now(), replica, False, ttft, provider, f"client: {type(exc).__name__}: {exc}")
    text = "".join(text_parts)
    failure = ""
    if error:
        failure = f"error event: {error}"
    elif text != EXPECTED:
        failure = f"incomplete answer ({len(text.split())} of {TOKENS} words)"
    elif done != 1 or roles != 1:
        failure = f"{done} [DONE], {roles} role chunks"
    return Outcome(started, timeline.now(), replica, not failure, ttft, provider, failure)


@dataclass
class Watch:
    """Samples taken beside the load: each replica's RSS and readiness, once per interval."""

    rss: list[tuple[float, list[float]]] = field(default_factory=list)
    ready: list[tuple[float, list[str]]] = field(default_factory=list)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_circuits(metrics_text: str) -> set[str]:
    """Providers whose circuit is open (or half-open) on one replica, from its /metrics text."""
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("gateway_circuit_state{") and not line.endswith(" 0.0") and 'state="closed"' not in line:
            names.add(
                line.split('provider="', 1)[1].split('"', 1)[0] + " " + line.split('state="', 1)[1].split('"', 1)[0]
            )
    return names


async def watch(fleet: Fleet, timeline: Timeline, observed: Watch, stopping: asyncio.Event) -> None:
    last: list[str] = []
    circuits: list[set[str]] = [set() for _ in fleet.replica_urls]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while not stopping.is_set():
            now = timeline.now()
            observed.rss.append((now, [rss_mb(p.pid) for p in fleet.replicas]))
            for index, url in enumerate(fleet.replica_urls):
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url + "/metrics") as response:
                        opened = open_circuits(await response.text())
                    if opened != circuits[index]:
                        described = ", ".join(sorted(opened)) or "all closed"
                        timeline.note(f"replica {index} circuits: {described}")
                        circuits[index] = opened
            states = []
            for url in fleet.replica_urls:
                try:
                    async with session.get(url + "/readyz") as response:
                        body = await response.json()
                        states.append(body["status"] + (f" ({'; '.join(body['reasons'])})" if body["reasons"] else ""))
                except (aiohttp.ClientError, TimeoutError) as exc:
                    states.append(f"unreachable ({type(exc).__name__})")
            observed.ready.append((now, states))
            if states != last:
                for index, state in enumerate(states):
                    if not last or state != last[index]:
                        timeline.note(f"replica {index} /readyz: {state}")
                last = states
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 1.0)


@dataclass
class Marks:
    """Metrics scraped when each fault fired, to tell what followed each one apart."""

    victim: str = ""
    at_redis_kill: list[Any] = field(default_factory=list)
    at_provider_kill: list[Any] = field(default_factory=list)


async def events(
    fleet: Fleet, timeline: Timeline, progress: list[int], total: int, outage_s: float, marks: Marks
) -> None:
    """Fire the faults on progress."""

    async def reach(share: float) -> None:
        while progress[0] < share * total:
            await asyncio.sleep(0.05)

    await reach(0.3)
    marks.at_redis_kill = await scrape(fleet)
    timeline.note(f"redis-server killed (SIGKILL, pid {fleet.redis.process.pid if fleet.redis.process else '?'})")
    await asyncio.to_thread(fleet.redis.stop)
    await asyncio.sleep(outage_s)
    await asyncio.to_thread(fleet.redis.start)
    timeline.note(f"redis-server started again on port {fleet.redis.port} (empty: no persistence)")
    await reach(0.6)
    marks.at_provider_kill = await scrape(fleet)
    marks.victim = busiest(marks.at_provider_kill)
    fleet.fakes[marks.victim].kill()
    timeline.note(f"fake provider '{marks.victim}' killed (SIGKILL), the one with the most attempts so far")


async def scrape(fleet: Fleet) -> list[dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """Every sample of each replica's /metrics, keyed by (name, sorted labels)."""
    scraped = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for url in fleet.replica_urls:
            async with session.get(url + "/metrics") as response:
                text = await response.text()
            values = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
            scraped.append(values)
    return scraped


def total(scraped: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]], name: str, **labels: str) -> float:
    return sum(
        value
        for values in scraped
        for (metric, pairs), value in values.items()
        if metric == name and all((k, v) in pairs for k, v in labels.items())
    )


def busiest(scraped: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]]) -> str:
    counts = {spec.name: total(scraped, "gateway_upstream_requests_total", provider=spec.name) for spec in FAKES}
    return max(counts, key=lambda name: counts[name])


async def load(
    fleet: Fleet, requests: int, concurrency: int, time_limit_s: float, outage_s: float
) -> tuple[list[Outcome], Timeline, Watch, Marks, list[Any], list[Any]]:
    timeline = Timeline()
    marks = Marks()
    observed = Watch()
    stopping = asyncio.Event()
    outcomes: list[Outcome] = []
    progress = [0]
    issued = [0]
    deadline = time.monotonic() + time_limit_s
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=90)) as session:

        async def worker() -> None:
            while issued[0] < requests and time.monotonic() < deadline:
                number = issued[0]
                issued[0] += 1
                replica = number % len(fleet.replica_urls)
                url = fleet.replica_urls[replica] + "/v1/chat/completions"
                outcomes.append(await one_request(session, url, replica, timeline))
                progress[0] += 1

        watcher = asyncio.ensure_future(watch(fleet, timeline, observed, stopping))
        timeline.note(f"load starts: {requests} streamed requests at concurrency {concurrency}")
        faults = asyncio.ensure_future(events(fleet, timeline, progress, requests, outage_s, marks))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        timeline.note(f"load ends: {len(outcomes)} requests done")
        if not faults.done():
            faults.cancel()
            timeline.note("the run ended before every fault had fired")
        stopping.set()
        await watcher
    final = await scrape(fleet)
    boards = await leaderboards(fleet)
    return outcomes, timeline, observed, marks, final, boards


async def leaderboards(fleet: Fleet) -> list[Any]:
    """Each replica's ``/v1/gateway/stats``: the window both read from the shared Redis."""
    boards = []
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for url in fleet.replica_urls:
            async with session.get(url + "/v1/gateway/stats", headers=headers) as response:
                boards.append(await response.json())
    return boards


def ms(value: float | None) -> str:
    return "–" if value is None or value != value else f"{value * 1000:.0f}"


def window_stats(outcomes: list[Outcome], start: float, end: float) -> str:
    inside = [o for o in outcomes if start <= o.started < end]
    ok = [o for o in inside if o.ok]
    ttft = [o.ttft_s for o in ok if o.ttft_s is not None]
    e2e = [o.ended - o.started for o in ok]
    lost = len(inside) - len(ok)
    return (
        f"| {start:.1f}–{end:.1f} s | {len(inside)} | {lost} | {ms(quantile(ttft, 0.5))} | {ms(quantile(ttft, 0.99))} "
        f"| {ms(quantile(e2e, 0.5))} | {ms(quantile(e2e, 0.99))} |"
    )


def delta(after: list[Any], before: list[Any], name: str, **labels: str) -> float:
    return total(after, name, **labels) - (total(before, name, **labels) if before else 0.0)


def report(
    outcomes: list[Outcome],
    timeline: Timeline,
    observed: Watch,
    marks: Marks,
    scraped: list[Any],
    boards: list[Any],
    command: str,
    wall_s: float,
    concurrency: int,
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    ok = [o for o in outcomes if o.ok]
    lost = [o for o in outcomes if not o.ok]
    ttft = [o.ttft_s for o in ok if o.ttft_s is not None]
    e2e = [o.ended - o.started for o in ok]
    victim = marks.victim
    kill_at = next((t for t, what in timeline.events if "killed (SIGKILL), the one" in what), None)
    redis_down = next((t for t, what in timeline.events if what.startswith("redis-server killed")), None)
    redis_up = next((t for t, what in timeline.events if what.startswith("redis-server started")), None)
    lines = [
        "# Soak: two replicas, one Redis, Redis restarted and a provider killed midway",
        "",
        f"Measured {now} on {machine()}.",
        "",
        f"Command: `{command}`. Separate processes on loopback: a `redis-server` of its own (no persistence),",
        "three fake providers (`python -m gateway fake-provider`), two replicas (`python -m gateway serve`,",
        f"stats backend redis with a {WINDOW_S} s window, client keys with per-key limits counted in Redis) and",
        "the client (aiohttp on uvloop, one process, sending to the replicas in turn); all share the 2 cores.",
        "Every deployment is marked `continue_prefill`. A request counts as served only if the client read",
        f"the exact expected answer ({TOKENS} words), one role chunk, no error event and exactly one `[DONE]`;",
        "anything else is *lost*. At least two providers were up at all times, so every request had a",
        "healthy alternative: the target is 0 lost.",
        "",
        "Providers: "
        + "; ".join(
            f"`{s.name}` TTFT {s.ttft_s:g} s, {s.tokens_per_s:g} tokens/s (log-normal jitter 0.2), ${s.price:g}/M in"
            for s in FAKES
        )
        + ".",
        "",
        "## Result",
        "",
        f"- Requests: **{len(outcomes)}** streamed, concurrency {concurrency}, in {wall_s:.1f} s "
        f"({len(outcomes) / wall_s:.0f} req/s).",
        f"- **Lost: {len(lost)}** (target 0).",
        f"- Latency of served requests (client side, ms): TTFT p50 {ms(quantile(ttft, 0.5))}, "
        f"p95 {ms(quantile(ttft, 0.95))}, p99 {ms(quantile(ttft, 0.99))}; end-to-end p50 {ms(quantile(e2e, 0.5))}, "
        f"p95 {ms(quantile(e2e, 0.95))}, p99 {ms(quantile(e2e, 0.99))}.",
    ]
    if lost:
        reasons = Counter(o.failure.split(":")[0] for o in lost)
        lines.append("- Lost by reason: " + ", ".join(f"{reason}: {count}" for reason, count in reasons.most_common()))
        for o in lost[:10]:
            lines.append(f"  - at {o.started:.2f} s, replica {o.replica}, provider {o.provider or '?'}: {o.failure}")
    recovered = total(scraped, "gateway_stream_breaks_total", result="recovered")
    failed = total(scraped, "gateway_stream_breaks_total", result="failed")
    lines += [
        f"- Streams that broke mid-answer: {recovered + failed:.0f}, of which **{recovered:.0f} recovered** "
        f"(finished by another provider) and {failed:.0f} not.",
        f"- Fallbacks before the first byte: {total(scraped, 'gateway_fallbacks_total'):.0f}.",
        f"- Stats samples dropped by the replicas: {total(scraped, 'gateway_stats_samples_dropped_total'):.0f}.",
    ]
    if rss := memory_summary(observed):
        lines.append(f"- Replica memory: {rss}")
    outcomes_shown = ("ok", "upstream_error", "timeout", "broken_stream", "client_cancelled")
    lines += [
        "",
        "Upstream attempts by provider and outcome (both replicas, from `/metrics`):",
        "",
        "| provider | " + " | ".join(outcomes_shown) + " |",
        "|---|" + "---|" * len(outcomes_shown),
    ]
    for spec in FAKES:
        cells = [
            f"{total(scraped, 'gateway_upstream_requests_total', provider=spec.name, outcome=o):.0f}"
            for o in outcomes_shown
        ]
        lines.append(f"| {spec.name}{' (killed)' if spec.name == victim else ''} | " + " | ".join(cells) + " |")
    lines += ["", "## What happened at each event", ""]
    if redis_down is not None and redis_up is not None:
        during = [o for o in outcomes if redis_down <= o.started < redis_up + 5]
        degraded = [t for t, what in timeline.events if "/readyz: degraded" in what]
        ready = [t for t, what in timeline.events if "/readyz: ready" in what and t > redis_down]
        lines += [
            f"**Redis killed at {redis_down:.1f} s, started again (empty) at {redis_up:.1f} s.** "
            f"{len(during)} requests started between the kill and 5 s after the restart; "
            f"{sum(not o.ok for o in during)} lost. Both replicas reported `degraded` on `/readyz` "
            + (f"from {min(degraded):.1f} s " if degraded else "")
            + (f"until {max(ready):.1f} s" if ready else "to the end")
            + " (the stats store and the rate limiter each name Redis; the limiter fell back to per-replica "
            "counting, the router kept routing on each replica's own recent samples). Samples were buffered "
            f"and flushed on reconnect: {total(scraped, 'gateway_stats_samples_dropped_total'):.0f} dropped. "
            "At the end both replicas read the same shared window:",
            "",
            "| deployment | samples (replica 0) | samples (replica 1) | success | TTFT p50 ms | tokens/s p50 |",
            "|---|---|---|---|---|---|",
        ]
        by_replica = [{row["deployment"]: row for row in board["data"]} for board in boards]
        for spec in FAKES:
            rows = [board.get(spec.name, {}) for board in by_replica]
            first = rows[0] if rows else {}
            success = first.get("success_rate")
            speed = first.get("tokens_per_s_p50")
            lines.append(
                f"| {spec.name} | "
                + " | ".join(str(row.get("samples", "–")) for row in rows)
                + f" | {'–' if success is None else f'{success:.3f}'} | {ms(first.get('ttft_p50_s'))} | "
                + ("–" if speed is None else f"{speed:.1f}")
                + " |"
            )
        lines.append("")
    if kill_at is not None and victim:
        before = marks.at_provider_kill
        after_outcomes = [o for o in outcomes if o.started >= kill_at]
        broke = delta(scraped, before, "gateway_stream_breaks_total", provider=victim, result="recovered")
        broke_failed = delta(scraped, before, "gateway_stream_breaks_total", provider=victim, result="failed")
        refused = delta(scraped, before, "gateway_upstream_requests_total", provider=victim, outcome="upstream_error")
        cut = delta(scraped, before, "gateway_upstream_requests_total", provider=victim, outcome="broken_stream")
        served = {
            spec.name: delta(scraped, before, "gateway_upstream_requests_total", provider=spec.name, outcome="ok")
            for spec in FAKES
        }
        circuit = [t for t, what in timeline.events if "circuits:" in what and victim in what and t >= kill_at]
        lines += [
            f"**`{victim}` killed at {kill_at:.1f} s** (SIGKILL; it had the most attempts). Its streams in flight "
            f"broke: {broke:.0f} mid-answer, **all finished by another provider** "
            f"({broke_failed:.0f} could not be), and {cut - broke:.0f} before their first token (fallback). "
            f"{refused:.0f} later attempts found the port closed and fell back at once"
            + (f"; its circuit opened on the replicas from {min(circuit):.1f} s" if circuit else "")
            + f". Of the {len(after_outcomes)} requests started after the kill, "
            f"{sum(not o.ok for o in after_outcomes)} were lost. Answers completed after the kill: "
            + ", ".join(f"{name} {count:.0f}" for name, count in served.items())
            + ".",
            "",
        ]
    lines += [
        "## Timeline",
        "",
        "| t (s) | event |",
        "|---|---|",
        *(f"| {t:.2f} | {what} |" for t, what in timeline.events),
        "",
        "## Latency around each event",
        "",
        "Requests by start time; TTFT and end-to-end of the served ones, in ms.",
        "",
        "| window | requests | lost | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    end = max((o.ended for o in outcomes), default=0.0)
    marks_at = sorted({0.0, *(t for t in (redis_down, redis_up, kill_at) if t is not None), end})
    for start, stop_at in zip(marks_at, marks_at[1:], strict=False):
        lines.append(window_stats(outcomes, start, stop_at))
    lines += [
        "",
        "## Replica memory (RSS, MB)",
        "",
        "| t (s) | replica 0 | replica 1 |",
        "|---|---|---|",
    ]
    step = max(1, len(observed.rss) // 15)
    for t, values in observed.rss[::step] + ([observed.rss[-1]] if observed.rss else []):
        lines.append(f"| {t:.0f} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    return "\n".join(lines) + "\n"


def memory_summary(observed: Watch) -> str:
    """RSS growth once the stats window is full (its slices are the one thing meant to grow until then)."""
    if not observed.rss:
        return ""
    full = [(t, values) for t, values in observed.rss if t >= WINDOW_S + 10]
    baseline_t, baseline = full[0] if full else observed.rss[len(observed.rss) // 5]
    end_t, last = observed.rss[-1]
    first = observed.rss[0][1]
    parts = [
        f"replica {i} {first[i]:.0f} MB at the start, {baseline[i]:.1f} MB at {baseline_t:.0f} s, "
        f"{last[i]:.1f} MB at {end_t:.0f} s (**{last[i] - baseline[i]:+.1f} MB**)"
        for i in range(len(last))
    ]
    why = "the stats window being full" if full else "20% into a run shorter than the stats window"
    return "; ".join(parts) + f" (from {baseline_t:.0f} s, {why}, to the end)."


async def run(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, fleet_up(Path(tmp)) as fleet:
        await wait_ready(fleet)
        started = time.monotonic()
        outcomes, timeline, observed, marks, scraped, boards = await load(
            fleet, args.requests, args.concurrency, args.time_limit, args.outage
        )
        wall = time.monotonic() - started
        command = "python -m benchmarks.soak" + (" --quick" if args.quick else "")
        for index in range(len(fleet.replicas)):
            log = (fleet.workdir / f"replica-{index}.log").read_text(errors="replace")
            errors = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
            if errors:
                timeline.events.append(
                    (wall, f"replica {index} logged {len(errors)} error lines, first: {errors[0][:160]}")
                )
        return report(outcomes, timeline, observed, marks, scraped, boards, command, wall, args.concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--requests", type=int, default=24000)
    parser.add_argument("--concurrency", type=int, default=240)
    parser.add_argument("--time-limit", type=float, default=300.0, help="stop issuing requests after this long")
    parser.add_argument("--outage", type=float, default=4.0, help="seconds Redis stays down")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.requests, args.concurrency, args.outage = 1200, 100, 2.0
    text = uvloop.run(run(args))
    print(text)
    if not args.quick:
        args.output.write_text(text)
        print(f"written to {args.output}")


if __name__ == "__main__":
    main()
