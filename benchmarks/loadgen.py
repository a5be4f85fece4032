"""The load generator: streamed chat requests from aiohttp on uvloop, in one or more processes.

Why this shape: on a 2-core machine the client competes with the fake provider and the proxy
for CPU, so it must be as cheap per request as the servers it measures, or it measures itself.
Each worker process runs its own uvloop loop and aiohttp session, and watches the stream with
a byte scan (no JSON parsing): the first event whose ``content`` is not empty is the first
token (TTFT), ``[DONE]`` ends a complete answer. The fake's and the proxies' bytes are relayed
unchanged, so the scan sees the same bytes on every target.

A run is a closed loop: ``concurrency`` requests in flight, each replaced by the next as it
ends, until ``requests`` have been sent or the time limit passes. Before a run, each worker
sends one request per connection (not counted) to open its connections and warm the servers;
the coordinator then starts all workers at once, so that CPU can be read from /proc around the
measured part only.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

import aiohttp
import uvloop

FIRST_TOKEN = re.compile(rb'"content":\s*"[^"]')
DONE = b"data: [DONE]"


@dataclass(frozen=True)
class Job:
    """One run, as seen by one worker."""

    url: str
    body: bytes
    concurrency: int
    requests: int
    time_limit_s: float
    ramp_s: float = 0.0
    """Spread the slots' first requests over this long, so that streams of equal length do not
    start and end in waves (one stream's length keeps a paced load even)."""
    request_timeout_s: float = 120.0
    warm_up: bool = True
    stream: bool = True
    """False: a whole JSON answer, complete when it holds ``choices``; its TTFT is its end-to-end."""


@dataclass
class Outcome:
    """What a run observed. Times in seconds, instants are ``time.monotonic`` readings (shared by
    every process on the machine).

    The *steady* part of a run is the window in which every slot has a request in flight: from the
    last slot's first request to the first slot's last one. Its requests give the latency figures
    and its completions the rate, so that the ramp at the start and the drain at the end (fewer
    requests in flight than the concurrency) do not count.
    """

    ok: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    """The first few failures in words (an error body, an exception), to tell what went wrong."""
    requests: list[tuple[float, float, float]] = field(default_factory=list)
    """(start, TTFT, end-to-end) of each complete answer."""
    started: float = 0.0
    ended: float = 0.0
    steady_from: float = 0.0
    steady_until: float = math.inf

    @property
    def wall_s(self) -> float:
        return max(0.0, self.ended - self.started)

    def steady(self) -> list[tuple[float, float, float]]:
        """The requests started in the steady window (all of them if it holds too few to go by)."""
        inside = [r for r in self.requests if self.steady_from <= r[0] <= self.steady_until]
        return inside if len(inside) >= max(10, len(self.requests) // 4) else self.requests

    @property
    def ttft_s(self) -> list[float]:
        return [ttft for _, ttft, _ in self.steady()]

    @property
    def e2e_s(self) -> list[float]:
        return [e2e for _, _, e2e in self.steady()]

    @property
    def rate(self) -> float:
        """Completions per second in the steady window, or over the whole run if it is too short."""
        span = self.steady_until - self.steady_from
        done = sum(1 for start, _, e2e in self.requests if self.steady_from <= start + e2e <= self.steady_until)
        if span > 0 and done >= 10:
            return done / span
        return self.ok / self.wall_s if self.wall_s else 0.0

    def fail(self, kind: str, detail: str = "") -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
        sample = f"{kind}: {detail}"[:300]
        if len(self.error_samples) < 3 and sample not in self.error_samples:
            self.error_samples.append(sample)

    def merge(self, other: Outcome) -> None:
        self.ok += other.ok
        self.errors += other.errors
        for kind, count in other.error_kinds.items():
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + count
        for sample in other.error_samples:
            if len(self.error_samples) < 3 and sample not in self.error_samples:
                self.error_samples.append(sample)
        self.requests += other.requests
        self.started = min(self.started, other.started) if self.started else other.started
        self.ended = max(self.ended, other.ended)
        self.steady_from = max(self.steady_from, other.steady_from)
        self.steady_until = min(self.steady_until, other.steady_until)


async def one_request(session: aiohttp.ClientSession, job: Job, outcome: Outcome) -> None:
    started = time.monotonic()
    ttft: float | None = None
    carry = b""
    complete = False
    try:
        async with session.post(job.url, data=job.body, headers={"content-type": "application/json"}) as response:
            if response.status != 200:
                outcome.fail(f"HTTP {response.status}", (await response.read()).decode(errors="replace"))
                return
            if not job.stream:
                body = await response.read()
                if b'"choices"' not in body:
                    outcome.fail("incomplete answer", body.decode(errors="replace"))
                    return
                e2e = time.monotonic() - started
                outcome.ok += 1
                outcome.requests.append((started, e2e, e2e))
                return
            async for chunk in response.content.iter_any():
                window = carry + chunk
                if ttft is None and FIRST_TOKEN.search(window):
                    ttft = time.monotonic() - started
                if DONE in window:
                    complete = True
                carry = window[-40:]
    except (aiohttp.ClientError, TimeoutError) as exc:
        outcome.fail(type(exc).__name__, str(exc))
        return
    if ttft is None or not complete:
        outcome.fail("incomplete stream")
        return
    outcome.ok += 1
    outcome.requests.append((started, ttft, time.monotonic() - started))


async def run_job(job: Job, ready: Callable[[], None], go: Callable[[], None]) -> Outcome:
    """Warm up, call ``ready``, block in ``go`` until told to start, then run the closed loop."""
    outcome = Outcome()
    # Below uvicorn's 5 s keep-alive: a connection the server may be closing is never reused (that
    # race would fail requests for the client's sake, e.g. while paced slots wait out their ramp).
    connector = aiohttp.TCPConnector(limit=job.concurrency, limit_per_host=0, keepalive_timeout=3)
    timeout = aiohttp.ClientTimeout(total=job.request_timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if job.warm_up:
            await asyncio.gather(*(one_request(session, job, Outcome()) for _ in range(job.concurrency)))
        ready()
        # The signal to start comes over a pipe; waiting for it blocks this loop, which is idle.
        go()
        remaining = job.requests
        deadline = time.monotonic() + job.time_limit_s
        firsts: list[float] = []
        lasts: list[float] = []

        async def slot(index: int) -> None:
            nonlocal remaining
            await asyncio.sleep(job.ramp_s * index / job.concurrency)
            first = last = time.monotonic()
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                last = time.monotonic()
                await one_request(session, job, outcome)
            firsts.append(first)
            lasts.append(last)

        outcome.started = time.monotonic()
        await asyncio.gather(*(slot(i) for i in range(job.concurrency)))
        outcome.ended = time.monotonic()
        outcome.steady_from, outcome.steady_until = max(firsts), min(lasts)
    return outcome


def _worker(conn: Connection) -> None:
    """A worker process: runs each ``Job`` it receives until it receives ``None``."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        while True:
            job = conn.recv()
            if job is None:
                return

            def ready() -> None:
                conn.send("ready")

            def go() -> None:
                if conn.recv() != "go":
                    raise RuntimeError("worker expected 'go'")

            conn.send(runner.run(run_job(job, ready, go)))


@dataclass
class Run:
    """A run on its workers: ready (warmed up) until ``go``, then collected with ``wait``."""

    workers: list[Connection]
    pending: list[Connection] = field(default_factory=list)
    outcome: Outcome = field(default_factory=Outcome)

    def go(self) -> None:
        for conn in self.workers:
            conn.send("go")
        self.pending = list(self.workers)

    def wait(self, timeout: float | None = None) -> bool:
        """Collect results for up to ``timeout`` seconds (None: until all are in); True once all are in."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            for conn in wait(self.pending, left):
                assert isinstance(conn, Connection)
                self.outcome.merge(conn.recv())
                self.pending.remove(conn)
        return not self.pending


class LoadGenerator:
    """``processes`` worker processes, started once and reused for every run; close with ``close``."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[multiprocessing.process.BaseProcess] = []
        for _ in range(processes):
            parent, child = context.Pipe()
            proc = context.Process(target=_worker, args=(child,), daemon=True)
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs if proc.pid is not None]

    def prepare(
        self,
        url: str,
        body: bytes,
        concurrency: int,
        requests: int,
        time_limit_s: float,
        ramp_s: float = 0.0,
        warm_up: bool = True,
        stream: bool = True,
    ) -> Run:
        """Hand the run to the workers (concurrency and requests split between them) and wait until
        they are warmed up; the run starts with ``Run.go``."""
        workers = self._conns[: max(1, min(len(self._conns), concurrency))]
        share = len(workers)
        for index, conn in enumerate(workers):
            conn.send(
                Job(
                    url=url,
                    body=body,
                    concurrency=concurrency // share + (index < concurrency % share),
                    requests=requests // share + (index < requests % share),
                    time_limit_s=time_limit_s,
                    ramp_s=ramp_s,
                    warm_up=warm_up,
                    stream=stream,
                )
            )
        for conn in workers:
            if conn.recv() != "ready":
                raise RuntimeError("worker did not get ready")
        return Run(workers)

    def close(self) -> None:
        for conn in self._conns:
            conn.send(None)
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
