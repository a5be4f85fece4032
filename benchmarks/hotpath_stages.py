"""µs per request stage of the whole gateway, in process: one app, its real runtime, an upstream in memory.

``benchmarks.hotpath`` times pieces alone; this drives whole requests (``hotpath_memory``) through the app built by
``create_app`` from ``gateway.bench.toml`` (stats in memory, metrics and the access log on, to a
file), with the provider's client swapped for one that answers from memory, so that what is
timed is the gateway's own work and nothing else: no sockets, no uvicorn, no fake provider. Each
stage is the exclusive CPU of the functions that make it (a stage nested in another is counted
once, in the inner one); whatever no stage claims is *request glue* (the request id, the access
record, the hang-up watch's task, the keep-alive timer, headers), so the stages add up to the
whole. The whole is also timed without the stage clocks (what the clocks themselves cost shows
as the difference).

    python -m benchmarks.hotpath --stages                 # the table, streamed and non-streamed
    python -m benchmarks.hotpath --stages --deployments 5 # the same model served by five deployments
    python -m benchmarks.hotpath --stages --profile       # and cProfile's top functions of each kind of request

*Per chunk* is the relay loop's CPU per upstream chunk (36 chunks, one event each: the role, 32
words, the finish, usage, ``[DONE]``) less that of a bare loop reading the same chunks and sending
each one (the least a passthrough does per chunk). The *reply* is the same kind of work for either kind of request,
counted alike: ``send_to``'s own, outside any chunk loop (a whole answer's headers and its two messages; a stream's
headers, its total deadline, its forwarder, its ending and outcome), the relay loop (``StreamReply._relay``) apart;
the answer's read, token count and ``Sample`` are its *meter finish*, for both.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import logging
import os
import pstats
import tempfile
import time
from collections.abc import Callable
from typing import Any

import uvloop

from benchmarks.hotpath_memory import (
    Driver,
    MemoryResponse,
    driven_us,
    running_app,
    running_passthrough,
    stream_chunks,
)
from gateway import native
from gateway.accesslog import ACCESS_LOGGER, AccessLog, LineWriter, configure_access_log
from gateway.admission.access import AccessControl, Ticket
from gateway.api import ProxyEndpoint
from gateway.meter import StreamMeter
from gateway.metrics.series import Metrics
from gateway.relay.dispatch import Dispatcher
from gateway.relay.replies import FullReply, StreamReply
from gateway.relay.runner import AttemptRunner
from gateway.runtime import runtime_of
from gateway.samples import SampleFanout

BUDGETS_US: dict[str, float] = {
    "intake": 25.0,
    "plan": 40.0,
    "routing bookkeeping": 15.0,
    "attempt set-up": 30.0,
    "per chunk (beyond the passthrough)": 1.0,
    "meter finish": 50.0,
    "sinks": 20.0,
    "request glue": 15.0,
}
"""What each stage may cost, µs per request: the gateway's own work within ~160 µs (issue 41's guide); routing
bookkeeping (attempt started, streaming, finished) and request glue are not named by the issue and get their own."""


class StageClock:
    """Exclusive CPU time per stage of wrapped functions (this thread's CPU clock: what other processes take on a
    busy machine is not counted).

    Each wrapped call costs about one clock read to itself and one to its caller's stage; ``calibrate`` measures
    that cost and ``corrected`` takes it off each stage.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.children: dict[str, int] = {}
        self._stack: list[list[Any]] = []
        self._undo: list[tuple[type, str, Any]] = []

    def _enter(self, stage: str) -> None:
        self._stack.append([stage, time.thread_time(), 0.0])

    def _exit(self) -> None:
        stage, start, inner = self._stack.pop()
        elapsed = time.thread_time() - start
        self.totals[stage] = self.totals.get(stage, 0.0) + elapsed - inner
        self.calls[stage] = self.calls.get(stage, 0) + 1
        if self._stack:
            parent = self._stack[-1]
            parent[2] += elapsed
            self.children[parent[0]] = self.children.get(parent[0], 0) + 1

    def wrap(self, owner: type, name: str, stage: str) -> None:
        # Wrapped where it is defined: Metrics takes its methods from mixins.
        owner = next(c for c in owner.__mro__ if name in c.__dict__)
        original = owner.__dict__[name]
        enter, leave = self._enter, self._exit
        if asyncio.iscoroutinefunction(original):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                enter(stage)
                try:
                    return await original(*args, **kwargs)
                finally:
                    leave()

            setattr(owner, name, timed_async)
        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                enter(stage)
                try:
                    return original(*args, **kwargs)
                finally:
                    leave()

            setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def unwrap(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def corrected(self, per_call_s: float) -> dict[str, float]:
        """Each stage's seconds less the clocks' own cost (``per_call_s`` per call made and per call it wrapped)."""
        return {
            stage: max(0.0, total - per_call_s * (self.calls.get(stage, 0) + self.children.get(stage, 0)))
            for stage, total in self.totals.items()
        }


class _Empty:
    def nothing(self) -> None:
        pass


def calibrate(calls: int = 100_000) -> float:
    """Seconds one wrapped call adds to a stage (half of what wrapping an empty method adds per call)."""
    item = _Empty()
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(calls):
            item.nothing()
        bare = time.process_time() - start
        clock = StageClock()
        clock.wrap(_Empty, "nothing", "empty")
        start = time.process_time()
        for _ in range(calls):
            item.nothing()
        wrapped = time.process_time() - start
        clock.unwrap()
        best = min(best, (wrapped - bare) / calls / 2)
    return best


def _instrument(clock: StageClock, router_type: type) -> None:
    clock.wrap(ProxyEndpoint, "__call__", "request glue")
    clock.wrap(ProxyEndpoint, "_prepare", "intake")
    clock.wrap(router_type, "plan", "plan")
    for name in ("attempt_started", "attempt_streaming", "attempt_finished"):
        clock.wrap(router_type, name, "routing bookkeeping")
    clock.wrap(AccessControl, "reserve_spend", "attempt set-up")
    clock.wrap(Dispatcher, "dispatch", "attempt set-up")
    # The reply outside any chunk loop, alike for both kinds (a whole answer's finish, a stream's meter finish and
    # record, are the meter's stage); a stream's chunk loop is its relay.
    clock.wrap(FullReply, "send_to", "reply")
    clock.wrap(StreamReply, "send_to", "reply")
    clock.wrap(StreamReply, "_relay", "relay")
    clock.wrap(StreamMeter, "finish", "meter finish")
    clock.wrap(AttemptRunner, "record", "meter finish")
    clock.wrap(AttemptRunner, "finish_full", "meter finish")
    clock.wrap(SampleFanout, "record", "sinks")
    clock.wrap(AccessLog, "write", "sinks")
    clock.wrap(LineWriter, "flush", "sinks")  # where a line handed over unbuilt is made, with its batch
    clock.wrap(Ticket, "release", "sinks")
    for name in ("decision", "attempt_started", "attempt_ended", "committed"):
        clock.wrap(Metrics, name, "sinks")


async def bare_relay_us(chunks: list[bytes], rounds: int) -> float:
    """µs per chunk of the least a passthrough does: read a chunk, send it (to a ``send`` that does what the
    ``Driver``'s does with each body message, so that the client's own work is in neither side of the difference).
    """
    marks = [0.0]
    sent = [0]

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if not marks[0]:
                marks[0] = time.thread_time()
            sent[0] += len(message.get("body", b""))
            if not message.get("more_body", False) and not marks[0]:
                marks[0] = time.thread_time()

    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(rounds):
            marks[0] = 0.0
            response = MemoryResponse(chunks, "text/event-stream")
            while chunk := await response.read_chunk():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        best = min(best, (time.process_time() - start) / (rounds * len(chunks)))
    return best * 1e6


async def passthrough_us(stream: bool, requests: int, repeats: int, chunks: list[bytes] | None = None) -> float:
    """µs per request of the passthrough app, whole requests in process (``chunks``: the stream's, if not the usual)."""
    async with running_passthrough(chunks) as app:
        return await driven_us(app, stream, requests, repeats, warm=200)


def _flush_lines() -> None:
    """Write (and make) the access-log lines still pending: each timed block pays for its own requests' lines."""
    for handler in logging.getLogger(ACCESS_LOGGER).handlers:
        handler.flush()


async def best_stages(
    driver: Driver, instrument: Callable[[StageClock], None], requests: int, repeats: int, per_call: float
) -> dict[str, float]:
    """µs per request of each stage ``instrument`` wraps on a fresh clock, the best of ``repeats`` runs of
    ``requests`` requests (the clocks' own cost per wrapped call, ``per_call``, taken off)."""
    best: dict[str, float] = {}
    for _ in range(repeats):
        clock = StageClock()
        instrument(clock)
        try:
            gc.collect()
            for _ in range(requests):
                await driver.one()
            _flush_lines()
        finally:
            clock.unwrap()
        for stage, total in clock.corrected(per_call).items():
            best[stage] = min(best.get(stage, float("inf")), total / requests * 1e6)
    return best


async def measure_stages(deployments: int, requests: int, repeats: int, profile: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with running_app(deployments) as app:
        runtime = runtime_of({"app": app})
        router_type = type(runtime.router)
        chunks = len(stream_chunks())
        per_call = calibrate()
        results["clock_us"] = per_call * 1e6
        for label, stream in (("streamed", True), ("non-streamed", False)):
            driver = Driver(app, stream)
            for _ in range(300):  # warm: the router has samples, caches are filled
                await driver.one()
            _flush_lines()
            whole = float("inf")
            phases = [float("inf")] * 3
            for _ in range(repeats):
                gc.collect()
                driver.phases = [0.0, 0.0, 0.0]
                start = time.process_time()
                for _ in range(requests):
                    await driver.one()
                _flush_lines()
                whole = min(whole, (time.process_time() - start) / requests)
                phases = [min(best, spent / requests * 1e6) for best, spent in zip(phases, driver.phases, strict=True)]
            best = await best_stages(driver, lambda clock: _instrument(clock, router_type), requests, repeats, per_call)
            results[label] = {"whole_us": whole * 1e6, "stages": best, "phases_us": phases}
            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                for _ in range(requests):
                    await driver.one()
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
                results.setdefault("profile", {})[label] = out.getvalue()
        results["bare_chunk_us"] = await bare_relay_us(stream_chunks(), requests)
        for label, stream in (("streamed", True), ("non-streamed", False)):
            results[label]["passthrough_us"] = await passthrough_us(stream, requests, repeats)
        # The passthrough's own cost per chunk: its streamed request less the same bytes in one chunk, per extra chunk.
        one_chunk = await passthrough_us(True, requests, repeats, [b"".join(stream_chunks())])
        results["passthrough_chunk_us"] = (results["streamed"]["passthrough_us"] - one_chunk) / (chunks - 1)
        results["chunks"] = chunks
    return results


def _rows(result: dict[str, Any], bare_chunk_us: float, chunks: int, stream: bool) -> list[tuple[str, float, float]]:
    """The table's rows: (stage, µs, budget); per chunk is beyond ``bare_chunk_us`` (the passthrough's own)."""
    stages = dict(result["stages"])
    relay = stages.pop("relay", 0.0)
    reply = stages.pop("reply", 0.0)
    rows = []
    order = ["intake", "plan", "routing bookkeeping", "attempt set-up"]
    if stream:
        order.append("per chunk (beyond the passthrough)")
        stages["per chunk (beyond the passthrough)"] = relay / chunks - bare_chunk_us
    order += ["meter finish", "sinks", "request glue"]
    for stage in order:
        rows.append((stage, stages.get(stage, 0.0), BUDGETS_US[stage]))
        if stage == "attempt set-up":
            what = "the stream's, outside its chunk loop" if stream else "the whole answer sent"
            rows.append((f"reply ({what})", reply, float("nan")))
    if stream:
        rows.append(("relay, all chunks", relay, float("nan")))
    return rows


def render(results: dict[str, Any], deployments: int) -> str:
    out = io.StringIO()
    bare, chunks = results["bare_chunk_us"], results["chunks"]
    print(
        f"Deployments of the model: {deployments}. Per chunk, a bare loop's (read, send: the least a passthrough "
        f"does): {bare:.2f} µs; the passthrough's own, from its whole requests: {results['passthrough_chunk_us']:.2f} "
        f"µs ({chunks} chunks). Stage clocks: "
        f"{results['clock_us']:.2f} µs per wrapped call, taken off. Routing modules: "
        f"{'compiled' if native.active() else 'Python'} (`gateway.native`).",
        file=out,
    )
    for label, stream in (("streamed", True), ("non-streamed", False)):
        result = results[label]
        rows = _rows(result, bare, chunks, stream)
        ratio = result["whole_us"] / result["passthrough_us"]
        print(
            f"\n{label}: whole request {result['whole_us']:.1f} µs in process (no stage clocks); the passthrough's "
            f"{result['passthrough_us']:.1f} µs ({ratio:.2f}×; sockets, uvicorn and aiohttp excluded from both)\n",
            file=out,
        )
        print("| stage | µs | budget | within |", file=out)
        print("|---|---|---|---|", file=out)
        summed = 0.0
        for stage, us, budget in rows:
            if budget == budget:  # not NaN
                summed += us if not stage.startswith("per chunk") else 0.0
                print(f"| {stage} | {us:.2f} | {budget:g} | {'yes' if us <= budget else '**no**'} |", file=out)
            else:
                summed += us
                print(f"| {stage} | {us:.2f} | – | – |", file=out)
        print(f"| sum of stages | {summed:.1f} | | |", file=out)
        before, during, after = result["phases_us"]
        print(
            f"\nCPU (µs) before the first body byte: {before:.1f}; from it to the end of the client's response: "
            f"{during:.1f}; after that (the tail, which a request arriving meanwhile waits for): {after:.1f}.",
            file=out,
        )
    for label, profile in results.get("profile", {}).items():
        print(f"\ncProfile, {label} requests, top 30 by own time:\n", file=out)
        print("```", file=out)
        print(profile.strip(), file=out)
        print("```", file=out)
    return out.getvalue()


def run(deployments: int, requests: int, repeats: int, profile: bool) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as sink:
        log_path = sink.name
    with open(log_path, "w") as log_stream:
        configure_access_log(log_stream)
        # The loop ``gateway serve`` runs on.
        results = uvloop.run(measure_stages(deployments, requests, repeats, profile))
    os.unlink(log_path)
    return render(results, deployments)


__all__ = ["BUDGETS_US", "StageClock", "calibrate", "run"]
