"""The soak's client and what it watches beside the load: each request checked word for word, the
replicas' memory, readiness and circuits, and the faults fired on progress."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.soak.fleet import BODY, CLIENT_KEY, EXPECTED, FAKES, TOKENS, Fleet
from gateway.sse import SSESplitter


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
    """Samples taken beside the load: each replica's RSS and readiness, and the host's load, once per interval."""

    rss: list[tuple[float, list[float]]] = field(default_factory=list)
    ready: list[tuple[float, list[str]]] = field(default_factory=list)
    host_load: list[float] = field(default_factory=list)
    """The 1-minute load average: above the core count, other work shared the cores with the soak."""


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
            observed.host_load.append(os.getloadavg()[0])
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
    heap_at: list[tuple[float, int]] = field(default_factory=list)
    """When each heap record was asked for: seconds into the load, requests done."""


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


HEAP_SHARES = (0.72, 0.86, 0.99)
"""When each replica's heap is recorded (``benchmarks.soak.heap``), as shares of the requests done: once the
provider kill (at 60%) has settled (at 80,000 requests, 9,600 requests or 70-90 s after it: the stats window,
60 s, holds only what followed it, and the broken streams' recoveries have ended), midway, and before the last
requests in flight wind down. Each record collects in full: three in a run."""


async def heap_records(
    fleet: Fleet, timeline: Timeline, progress: list[int], total: int, shares: Sequence[float], marks: Marks
) -> None:
    """Ask each replica for a heap record (SIGUSR1) as the load reaches each share; note the requests done then."""
    for share in sorted(shares):
        while progress[0] < share * total:
            await asyncio.sleep(0.05)
        for process in fleet.replicas:
            process.send_signal(signal.SIGUSR1)
        marks.heap_at.append((timeline.now(), progress[0]))


async def load(
    fleet: Fleet,
    requests: int,
    concurrency: int,
    time_limit_s: float,
    outage_s: float,
    heap_at: Sequence[float] = HEAP_SHARES,
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
        heaps = asyncio.ensure_future(heap_records(fleet, timeline, progress, requests, heap_at, marks))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        timeline.note(f"load ends: {len(outcomes)} requests done")
        if not faults.done():
            faults.cancel()
            timeline.note("the run ended before every fault had fired")
        heaps.cancel()
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
