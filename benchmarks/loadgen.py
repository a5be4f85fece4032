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
    request_timeout_s: float = 120.0
    warm_up: bool = True


@dataclass
class Outcome:
    """What a run observed. Times in seconds; ``started``/``ended`` are ``time.monotonic`` readings."""

    ok: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    ttft_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    @property
    def wall_s(self) -> float:
        return max(0.0, self.ended - self.started)

    @property
    def rate(self) -> float:
        return self.ok / self.wall_s if self.wall_s else 0.0

    def fail(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def merge(self, other: Outcome) -> None:
        self.ok += other.ok
        self.errors += other.errors
        for kind, count in other.error_kinds.items():
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + count
        self.ttft_s += other.ttft_s
        self.e2e_s += other.e2e_s
        self.started = min(self.started, other.started) if self.started else other.started
        self.ended = max(self.ended, other.ended)


async def one_request(session: aiohttp.ClientSession, job: Job, outcome: Outcome) -> None:
    started = time.perf_counter()
    ttft: float | None = None
    carry = b""
    complete = False
    try:
        async with session.post(job.url, data=job.body, headers={"content-type": "application/json"}) as response:
            if response.status != 200:
                await response.read()
                outcome.fail(f"HTTP {response.status}")
                return
            async for chunk in response.content.iter_any():
                window = carry + chunk
                if ttft is None and FIRST_TOKEN.search(window):
                    ttft = time.perf_counter() - started
                if DONE in window:
                    complete = True
                carry = window[-40:]
    except (aiohttp.ClientError, TimeoutError) as exc:
        outcome.fail(type(exc).__name__)
        return
    if ttft is None or not complete:
        outcome.fail("incomplete stream")
        return
    outcome.ok += 1
    outcome.ttft_s.append(ttft)
    outcome.e2e_s.append(time.perf_counter() - started)


async def run_job(job: Job, ready: Callable[[], None], go: Callable[[], None]) -> Outcome:
    """Warm up, call ``ready``, block in ``go`` until told to start, then run the closed loop."""
    outcome = Outcome()
    connector = aiohttp.TCPConnector(limit=job.concurrency, limit_per_host=0, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=job.request_timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if job.warm_up:
            await asyncio.gather(*(one_request(session, job, Outcome()) for _ in range(job.concurrency)))
        ready()
        # The signal to start comes over a pipe; waiting for it blocks this loop, which is idle.
        go()
        remaining = job.requests
        deadline = time.monotonic() + job.time_limit_s

        async def slot() -> None:
            nonlocal remaining
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                await one_request(session, job, outcome)

        outcome.started = time.monotonic()
        await asyncio.gather(*(slot() for _ in range(job.concurrency)))
        outcome.ended = time.monotonic()
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
        self, url: str, body: bytes, concurrency: int, requests: int, time_limit_s: float, warm_up: bool = True
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
                    warm_up=warm_up,
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
