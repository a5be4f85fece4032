"""Where a request's CPU goes with ``[stats] backend = "redis"``: the stats store's parts, and the rest.

Against a real ``redis-server`` of its own (a free loopback port, stopped by PID at the end), in process:

- *stats*: samples recorded through the real ``RedisStatsStore`` at the rhythm a gateway serving ``--rate``
  requests a second keeps (one flush per ``flush_interval_s`` worth of samples, one refresh per
  ``refresh_interval_s`` worth), and the process CPU of each part per sample: ``record`` (the request path's
  share), the flush (the sealed writes' script, the pair index, the minute history: command building, redis-py's
  encoding, the socket, the replies) and the refresh (the shared window read back, the view rebuilt). Two
  sample sets: *bench*, the overhead run's (one model, one deployment, a 32-token stream, values jittered), and
  *mixed* (``benchmarks.stats_cost``'s: 12 deployments, 5% failures).
- *settle*: the spend store's settlement of one request without a budget (what every request books to the spend
  breakdown), as ``AccessState`` hands it over, 64 at a time. Settlements written in batches wait ``BATCH_S`` for
  each other with nothing else to do, and a write after the loop sat idle costs several times a write from a busy
  one (cold caches): this overstates what a loaded gateway pays; the *whole* table is the one to trust.
- *whole*: whole streamed requests through the app (``benchmarks.hotpath_memory``: the provider answers from
  memory), with the stats in memory, in Redis, and in Redis with the settlement or ``record`` made to do
  nothing: what each part adds to a request, including its background work.

    python -m benchmarks.redis_record_cost                    # all three tables
    python -m benchmarks.redis_record_cost --only stats --profile   # and cProfile's top functions per part
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import os
import pstats
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.hotpath_memory import driven_us, running_app
from benchmarks.stats_cost import make_samples
from gateway.accesslog import configure_access_log
from gateway.admission.spending.ledger import Spender, SpendLedger
from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.config import StatsConfig
from gateway.redis_client import RedisConnections
from gateway.samples import Sample
from gateway.stats.redis_store import RedisStatsStore
from tests.redis_server import RedisServer

PARTS = ("record", "flush", "refresh")


def bench_samples(count: int, seed: int = 5) -> list[Sample]:
    """The overhead run's samples: one deployment, a 32-token stream; timings jittered as a loaded run's are."""
    rng = random.Random(seed)
    return [
        Sample(
            model="bench",
            deployment="fake",
            provider="fake",
            endpoint="chat",
            stream=True,
            outcome="ok",
            started_at=0.0,
            status=200,
            ttft_s=rng.lognormvariate(-6.0, 0.6),
            first_answer_s=rng.lognormvariate(-6.0, 0.6),
            tokens_per_s=rng.lognormvariate(9.0, 0.5),
            e2e_s=rng.lognormvariate(-4.5, 0.6),
            output_tokens=32,
            usage_prompt_tokens=20,
            usage_completion_tokens=32,
            prompt_tokens_estimate=30,
            attempt_s=0.002,
        )
        for _ in range(count)
    ]


class Profiles:
    """One cProfile per part, switched on around each timed call when asked for (``enabled``)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.profiles: dict[str, cProfile.Profile] = {}

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        profile = self.profiles.setdefault(name, cProfile.Profile())
        profile.enable()
        try:
            yield
        finally:
            profile.disable()

    def render(self, top: int) -> str:
        out = io.StringIO()
        for name, profile in self.profiles.items():
            print(f"\n### cProfile: {name}, top {top} by own time\n\n```", file=out)
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
            print("```", file=out)
        return out.getvalue()


class PacedClock:
    """Wall time as a gateway serving ``rate`` samples a second sees it: a sample's worth per ``tick``, so that the
    slices fill and close (and the refresh re-reads the open ones) as they would, however fast the loop runs."""

    def __init__(self, rate: int) -> None:
        self.now = time.time()
        self.step = 1.0 / rate

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.step


async def quiet_store(config: StatsConfig, clock: PacedClock) -> tuple[RedisStatsStore, RedisConnections]:
    """A started store without its background task: every flush and refresh is the benchmark's, timed."""
    store = RedisStatsStore(config, wall_clock=clock)
    connections = RedisConnections(config, os.environ)
    store.redis = connections
    store.client = connections.background()
    await store.sync()
    return store, connections


async def stats_parts(
    config: StatsConfig, samples: list[Sample], rate: int, profiles: Profiles
) -> tuple[dict[str, float], int]:
    """CPU seconds of each part over ``samples`` (recorded, flushed and refreshed at ``rate``), and the flushes."""
    per_flush = max(1, int(rate * config.flush_interval_s))
    flushes_per_refresh = max(1, round(config.refresh_interval_s / config.flush_interval_s))
    clock = PacedClock(rate)
    store, connections = await quiet_store(config, clock)
    spent = dict.fromkeys(PARTS, 0.0)
    flushes = 0
    try:
        for at in range(0, len(samples), per_flush):
            batch = samples[at : at + per_flush]
            with profiles.part("record"):
                start = time.process_time()
                for sample in batch:
                    store.record(sample)
                    clock.tick()
                spent["record"] += time.process_time() - start
            with profiles.part("flush"):
                start = time.process_time()
                await store.flush()
                spent["flush"] += time.process_time() - start
            flushes += 1
            if flushes % flushes_per_refresh == 0:
                with profiles.part("refresh"):
                    start = time.process_time()
                    await store.sync()  # the buffer is empty: a refresh
                    spent["refresh"] += time.process_time() - start
        assert store.health().buffered_samples == 0 and not store.health().degraded, store.health()
    finally:
        await connections.aclose()
    return spent, flushes


async def stats_table(server: RedisServer, rate: int, count: int, repeats: int, profiles: Profiles) -> str:
    defaults = StatsConfig()
    per_flush, per_refresh = int(rate * defaults.flush_interval_s), int(rate * defaults.refresh_interval_s)
    lines = [
        f"Stats store, µs of process CPU per sample at {rate} samples/s (a flush per {per_flush} samples, a refresh "
        f"per {per_refresh});"
        f" {count} samples per repeat, best of {repeats}:",
        "",
        "| samples | record | flush | refresh | all |",
        "|---|---|---|---|---|",
    ]
    for label, samples in (("bench", bench_samples(count)), ("mixed", make_samples(count, seed=6))):
        best = dict.fromkeys(PARTS, float("inf"))
        for repeat in range(repeats):
            prefix = f"bench-rec-{label}-{repeat}-{os.getpid()}"
            config = StatsConfig(backend="redis", redis_url=server.url, key_prefix=prefix)
            gc.collect()
            spent, _ = await stats_parts(config, samples, rate, profiles if repeat == 0 else Profiles(False))
            best = {part: min(best[part], spent[part] / len(samples) * 1e6) for part in PARTS}
        cells = " | ".join(f"{best[part]:.2f}" for part in PARTS)
        lines.append(f"| {label} | {cells} | {sum(best.values()):.2f} |")
    return "\n".join(lines)


async def settle_table(server: RedisServer, count: int, repeats: int, profiles: Profiles) -> str:
    """CPU per settlement of one unbudgeted request, 64 handed over at a time (``SpendLedger.settle_now``, as
    ``AccessState.settle``), then waited for (``flushed``)."""
    config = StatsConfig(backend="redis", redis_url=server.url, key_prefix=f"bench-settle-{os.getpid()}")
    connections = RedisConnections(config, os.environ)
    ledger = SpendLedger(RedisSpendStore.from_config(config, connections))
    spender = Spender.of("anonymous", "anonymous", None, None, None)
    samples = bench_samples(64)
    best = float("inf")
    try:
        for repeat in range(repeats):
            gc.collect()
            with profiles.part("settle") if repeat == 0 else contextlib.nullcontext():
                start = time.process_time()
                for _ in range(count // 64):
                    for sample in samples:
                        ledger.settle_now(spender, None, [sample])
                    await ledger.store.flushed()
                best = min(best, (time.process_time() - start) / (count // 64 * 64))
    finally:
        await ledger.store.aclose()
        await connections.aclose()
    return (
        f"Spend settlement of one request without a budget (one booking), 64 at a time: {best * 1e6:.1f} µs of "
        f"process CPU each ({count} per repeat, best of {repeats})."
    )


def _nothing(*_: Any) -> None:
    return None


@contextlib.contextmanager
def replaced(owner: type, name: str, value: Callable[..., Any] | None) -> Iterator[None]:
    """``owner.name`` swapped for ``value`` meanwhile (None: left as it is)."""
    original = owner.__dict__[name]
    if value is not None:
        setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


async def whole_us(redis_url: str | None, requests: int, repeats: int) -> float:
    async with running_app(1, redis_url) as app:
        return await driven_us(app, True, requests, repeats, warm=300)


async def whole_table(server: RedisServer, requests: int, repeats: int) -> str:
    variants: list[tuple[str, str | None, Callable[..., Any] | None, Callable[..., Any] | None]] = [
        ("memory", None, None, None),
        ("redis", server.url, None, None),
        ("redis, settlement does nothing", server.url, _nothing, None),
        ("redis, settlement and stats record do nothing", server.url, _nothing, _nothing),
    ]
    lines = [
        f"Whole streamed requests in process, µs of process CPU each (background work included; {requests} per "
        f"repeat, best of {repeats}; variants run twice, alternating, best of both):",
        "",
        "| variant | µs per request | over memory |",
        "|---|---|---|",
    ]
    best: dict[str, float] = {}
    for _ in range(2):
        for label, url, settle, record in variants:
            with replaced(RedisSpendStore, "queue", settle), replaced(RedisStatsStore, "record", record):
                us = await whole_us(url, requests, repeats)
            best[label] = min(best.get(label, float("inf")), us)
    for label, *_ in variants:
        lines.append(f"| {label} | {best[label]:.1f} | {best[label] - best['memory']:+.1f} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, server: RedisServer) -> str:
    profiles = Profiles(args.profile)
    parts = []
    if args.only in (None, "stats"):
        parts.append(await stats_table(server, args.rate, args.samples, args.repeats, profiles))
    if args.only in (None, "settle"):
        parts.append(await settle_table(server, args.samples, args.repeats, profiles))
    if args.only in (None, "whole"):
        parts.append(await whole_table(server, args.requests, args.repeats))
    if args.profile:
        parts.append(profiles.render(args.top))
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("stats", "settle", "whole"), help="one table only")
    parser.add_argument("--rate", type=int, default=900, help="samples per second the flushes are paced for (900)")
    parser.add_argument("--samples", type=int, default=18_000, help="samples (settlements) per repeat (18000)")
    parser.add_argument("--requests", type=int, default=2000, help="whole requests per repeat (2000)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats, best of (5)")
    parser.add_argument("--profile", action="store_true", help="cProfile each stats part and the settlement")
    parser.add_argument("--top", type=int, default=25, help="with --profile: functions shown per part (25)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-record-cost-") as workdir:
        server = RedisServer(Path(workdir) / "redis").start()
        try:
            with open(Path(workdir) / "access.log", "w") as log_stream:
                configure_access_log(log_stream)  # the whole requests' lines, as `gateway serve` writes them
                print(uvloop.run(main_async(args, server)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
