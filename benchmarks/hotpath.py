"""CPU per call of the gateway's own hot-path pieces, in-process: steadier than a whole run on a busy machine.

A run through the proxies (``benchmarks.overhead``) moves by ±10% on a shared machine; the
pieces one change touches cost a few percent of it. This times each piece alone (process CPU
time, best of several repeats), so a change's own gain shows: run it in this checkout and in a
worktree of the commit before (``PYTHONPATH=<worktree>``), with the same command, and compare.

    python -m benchmarks.hotpath
    git worktree add --detach /tmp/base HEAD~1
    python -m benchmarks.hotpath --compare /tmp/base --runs 5   # alternating runs, best of each

``--compare`` runs this script (this checkout's copy) under each checkout in turn, ``--runs``
times, alternating, and prints each piece's best time under both and their ratio.

Pieces: the request body read and the upstream body written; a 32-token stream through the meter
(fed per event, and in one chunk) and its ``finish`` (with the feeding, and alone), and the same answer as
OpenAI streams it (each chunk padded with its own ``obfuscation`` string: ``openai_stream_chunks``); the same
answer whole, read (``read_full_reply``: its tally, token count and ``Reading``); the same stream through the event
forwarder hiding its usage chunk; the access-log line of one request (as
``gateway serve`` writes it, to a file); one sample into the in-memory stats and the metrics; a routing
decision over five measured deployments; and the router's whole part of one request as the c=64 whole run
has it (five deployments, 63 streams in flight, an answer arriving between decisions: plan, start, the stream
read, the sample recorded, finish), which the decision alone understates: every answer moves a belief, and
the plan reads every stream that runs. (Before the measured router was deleted, these two rows timed it; the
belief router's were the ``routing (belief)`` rows.)
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import gateway
from benchmarks.hotpath_memory import full_body, openai_stream_chunks, stream_chunks
from gateway.accesslog import AccessLog, AccessRecord, configure_access_log
from gateway.api import parse_json_body
from gateway.config import parse_config
from gateway.meter import StreamMeter
from gateway.metrics.series import Metrics
from gateway.reading import read_full_reply
from gateway.relay.forward import EventForwarder
from gateway.relay.outbound import upstream_body
from gateway.relay.request import ProxyRequest
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_router import BeliefRouter
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore
from gateway.stats_config import StatsConfig
from gateway.tokens import load_token_counter

RAW = json.dumps(
    {
        "model": "bench",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. " * 4},
            {"role": "user", "content": "Say something."},
        ],
        "stream": True,
        "temperature": 0.7,
        "fake": {"ttft_s": 0.0, "tokens_per_s": 0.0, "output_tokens": 32},
    }
).encode()


def sample() -> Sample:
    return Sample(
        model="bench",
        deployment="fake",
        provider="fake",
        endpoint="chat",
        stream=True,
        outcome="ok",
        started_at=time.time(),
        status=200,
        ttft_s=0.0004,
        first_answer_s=0.0004,
        tokens_per_s=12000.0,
        e2e_s=0.002,
        output_tokens=32,
        usage_prompt_tokens=20,
        usage_completion_tokens=32,
        prompt_tokens_estimate=30,
        cost_usd=0.00001,
        attempt_s=0.0018,
        chunk_gaps_s=(0.0,) * 31,
    )


def warm_router(deployments: int = 5, kind: type[BeliefRouter] = BeliefRouter) -> tuple[BeliefRouter, RouteRequest]:
    """The router (``kind``: ``LiveBeliefRouter`` too) over ``deployments`` deployments of one model, each with 40
    answers heard, and a request for it."""
    names = [f"p{i}" for i in range(deployments)]
    config = parse_config(
        {
            "providers": [{"name": n, "base_url": f"http://127.0.0.1:9/{n}"} for n in names],
            "models": [{"name": "bench", "deployments": [{"provider": n, "model": n} for n in names]}],
        },
        source="hotpath.toml",
    )
    store = InMemoryStatsStore(StatsConfig())
    router = kind(config, store, rng=random.Random(1))
    request = RouteRequest(config.models[0], "chat", True, 30, 256, ProviderPreferences())
    for n in range(40):
        for candidate in router.plan(request).candidates:
            if router.attempt_started(candidate):
                answer = dataclasses.replace(
                    sample(), deployment=candidate.name, provider=candidate.provider.name, ttft_s=0.2 + 0.01 * n
                )
                store.record(answer)
                router.attempt_finished(candidate, answer)
    return router, request


class _Progress:
    """A stream in flight as the router reads it (``StreamProgress``)."""

    def __init__(self) -> None:
        self.received_bytes = 4000
        self.api = "chat"


def routing_cycle(in_flight: int = 63, deployments: int = 5) -> Callable[[], None]:
    """One request's routing work with ``in_flight`` others streaming: the oldest one's answer arrives each time
    (recorded in the stats, then ``attempt_finished``)."""
    router, route = warm_router(deployments)
    store = router.stats
    assert isinstance(store, InMemoryStatsStore)
    running: list[Any] = []

    def run() -> None:
        candidate = router.plan(route).candidates[0]
        router.attempt_started(candidate)
        router.attempt_streaming(candidate, _Progress())
        running.append(candidate)
        if len(running) > in_flight:
            done = running.pop(0)
            answer = dataclasses.replace(sample(), deployment=done.name, provider=done.provider.name)
            store.record(answer)
            router.attempt_finished(done, answer)

    for _ in range(500):
        run()
    return run


def request() -> ProxyRequest:
    return ProxyRequest("r" * 32, "chat", "/chat/completions", parse_json_body(RAW), True, "bench", time.perf_counter())


def timed(name: str, calls: int, work: Callable[[], Any], repeats: int = 5) -> tuple[str, float]:
    """Best µs per call of ``work`` over ``repeats`` runs of ``calls`` calls (process CPU time)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            work()
        best = min(best, (time.process_time() - start) / calls)
    return name, best * 1e6


def compare(base: str, runs: int) -> None:
    script = os.path.abspath(__file__)
    here = os.path.dirname(os.path.dirname(os.path.abspath(gateway.__file__)))
    best: dict[str, dict[str, float]] = {"this": {}, "base": {}}
    for _ in range(runs):
        for label, source in (("this", here), ("base", base)):
            env = {**os.environ, "PYTHONPATH": source}
            out = subprocess.run(
                [sys.executable, script], cwd=source, env=env, check=True, capture_output=True, text=True
            ).stdout
            for line in out.splitlines()[1:]:
                name, value = line[:34].strip(), float(line[34:].split()[0])
                best[label][name] = min(best[label].get(name, float("inf")), value)
    print(f"{'piece':34} {'this µs':>9} {'base µs':>9}  this ÷ base   (best of {runs} alternating runs each)")
    for name, us in best["this"].items():
        other = best["base"].get(name)
        ratio = f"{us / other:6.2f}" if other else "     –"
        print(f"{name:34} {us:9.2f} {other or float('nan'):9.2f}  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--compare", metavar="CHECKOUT", help="another checkout of the gateway to compare with")
    parser.add_argument("--runs", type=int, default=5, help="alternating runs per checkout with --compare (5)")
    parser.add_argument("--stages", action="store_true", help="µs per request stage, whole requests in process")
    parser.add_argument("--deployments", type=int, default=1, help="with --stages: deployments of the model (1)")
    parser.add_argument("--requests", type=int, default=2000, help="with --stages: requests per repeat (2000)")
    parser.add_argument("--repeats", type=int, default=5, help="with --stages: repeats, best of (5)")
    parser.add_argument("--profile", action="store_true", help="with --stages: cProfile each kind of request")
    args = parser.parse_args()
    if args.stages:
        from benchmarks.hotpath_stages import run

        print(run(args.deployments, args.requests, args.repeats, args.profile), end="")
        return
    if args.compare:
        compare(args.compare, args.runs)
        return
    measure()


def measure() -> None:
    counter = load_token_counter("o200k_base")
    events = stream_chunks()
    whole = b"".join(events)
    candidate = SimpleNamespace(
        provider=SimpleNamespace(stream_usage=True, name="fake"),
        deployment=SimpleNamespace(model="fake-model", apis=("chat",), translate=True),
    )
    proxied = request()
    whole_answer = full_body()

    def meter(chunks: list[bytes]) -> Callable[[], Any]:
        def run() -> Any:
            m = StreamMeter(time.perf_counter, 0.0)
            for chunk in chunks:
                m.feed(chunk)
            return m.finish(counter)

        return run

    def feed_only(chunks: list[bytes]) -> Callable[[], Any]:
        def run() -> None:
            m = StreamMeter(time.perf_counter, 0.0)
            for chunk in chunks:
                m.feed(chunk)

        return run

    def forward(chunks: list[bytes]) -> Callable[[], Any]:
        def run() -> None:
            forwarder = EventForwarder(drop_usage_only=True)  # the gateway asked for usage, the client did not
            for chunk in chunks:
                forwarder.feed(chunk)
            forwarder.flush()

        return run

    fed = StreamMeter(time.perf_counter, 0.0)
    for chunk in events:
        fed.feed(chunk)
    openai = openai_stream_chunks()
    fed_openai = StreamMeter(time.perf_counter, 0.0)
    for chunk in openai:
        fed_openai.feed(chunk)

    metrics = Metrics()
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as sink:
        log_path = sink.name
    log_stream = open(log_path, "w")  # noqa: SIM115 - held open for the whole run
    configure_access_log(log_stream)
    access = AccessLog(metrics)
    clock = time.perf_counter
    done = request()
    done.trace.samples.append(sample())

    def access_line() -> None:
        record = AccessRecord("r" * 32, "chat", clock(), clock)
        record.request = done
        access.write(record)

    store = InMemoryStatsStore(StatsConfig())
    one = sample()
    router, route = warm_router()
    rows = [
        timed("request body: parse", 20000, lambda: parse_json_body(RAW)),
        timed("upstream body: write", 20000, lambda: upstream_body(proxied, candidate)),  # type: ignore[arg-type]
        timed("meter: 32 tokens fed per event", 3000, feed_only(events)),
        timed("meter: fed per event + finish", 2000, meter(events)),
        timed("meter: one chunk + finish", 2000, meter([whole])),
        timed("meter: finish (fed per event)", 2000, lambda: fed.finish(counter)),
        timed("meter: OpenAI fed + finish", 2000, meter(openai)),
        timed("meter: OpenAI finish", 2000, lambda: fed_openai.finish(counter)),
        timed("whole answer: read", 20000, lambda: read_full_reply(whole_answer, counter)),
        timed("forwarder: fed per event", 3000, forward(events)),
        timed("forwarder: one chunk", 3000, forward([whole])),
        timed("access log: one request", 20000, access_line),
        timed("stats (memory): record", 20000, lambda: store.record(one)),
        timed("metrics: record", 20000, lambda: metrics.record(one)),
        timed("routing: plan, 5 deployments", 2000, lambda: router.plan(route)),
        timed("routing: request, 5 dep., 63 open", 3000, routing_cycle()),
    ]
    for handler in logging.getLogger("gateway.access").handlers:
        handler.flush()
    log_stream.close()
    os.unlink(log_path)
    out = io.StringIO()
    print(f"gateway from {os.path.dirname(gateway.__file__)}", file=out)
    for name, us in rows:
        print(f"{name:34} {us:8.2f} µs", file=out)
    print(out.getvalue(), end="")


if __name__ == "__main__":
    main()
