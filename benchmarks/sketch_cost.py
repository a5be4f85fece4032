"""What a recorded sample costs the next plan's quantile reads, with realistic spread in the histograms.

Every sample the stats record changes its deployment's window totals (``count_buckets``), and a changed
histogram's next ``quantile`` works its cumulative counts out again: with a few hundred buckets that, not the
reads, is what a record followed by a plan pays. ``benchmarks.hotpath``'s routers hear one constant answer
(one bucket), so this warms its own: one model, five deployments, first tokens log-normal around 0.5 s
(sigma 0.5), tokens/s around 80 (sigma 0.4), a few thousand samples each, on a fixed wall clock (one slice:
nothing ages out while timing). Rows, best µs per loop of several repeats (process CPU time):

- ``record``: ``InMemoryStatsStore.record`` alone (window total, pending slice, minutes);
- ``reads``: the quantiles a plan may read of every deployment's totals (``READS``: the soft constraints', the
  hedge's, the learned deadlines'), nothing recorded in between;
- ``record + reads``: one sample recorded, then those reads: the loop the hot path runs;
- ``plan`` and ``record + plan``: a real ``plan`` of the router, by policy.

    python -m benchmarks.sketch_cost [--repeats 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.hotpath import sample, timed
from gateway.config import parse_config
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_router import BeliefRouter
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore
from gateway.stats.snapshot import Metric
from gateway.stats_config import StatsConfig

DEPLOYMENTS = 5
WARM_SAMPLES = 2000
"""Samples per deployment in the window before timing."""
READS: dict[Metric, tuple[float, ...]] = {
    "ttft_s": (0.16, 0.5, 0.84, 0.9, 0.95, 0.99),
    "tokens_per_s": (0.16, 0.5, 0.84),
}
"""Per deployment: what the soft constraints (at the policy's quantiles), ``hedge_after`` (``hedge_quantile``) and the
deadlines (p99) may read of the window's totals (the set the measured router's plans read, kept for comparison)."""
FIXED_WALL_S = 1_800_000_000.0


def answers(seed: int, names: list[str]) -> Iterator[Sample]:
    """Endless realistic answers, each of a deployment drawn from ``names``."""
    rng = random.Random(seed)
    base = sample()
    while True:
        name = rng.choice(names)
        ttft = rng.lognormvariate(-0.693, 0.5)  # median 0.5 s
        yield dataclasses.replace(
            base,
            deployment=name,
            provider=name,
            ttft_s=ttft,
            first_answer_s=ttft * rng.uniform(1.0, 1.2),
            tokens_per_s=rng.lognormvariate(4.382, 0.4),  # median 80
            e2e_s=rng.lognormvariate(1.5, 0.6),
            output_tokens=int(rng.lognormvariate(5.5, 0.8)) + 1,
        )


def build(kind: type[Any], policy: str, max_tokens: int | None) -> tuple[Any, RouteRequest, InMemoryStatsStore]:
    """A router of ``kind`` over a warm window: a few hundred routed answers (its own views), then
    ``WARM_SAMPLES`` per deployment recorded."""
    names = [f"p{i}" for i in range(DEPLOYMENTS)]
    config = parse_config(
        {
            "providers": [{"name": n, "base_url": f"http://127.0.0.1:9/{n}"} for n in names],
            "models": [
                {"name": "bench", "policy": policy, "deployments": [{"provider": n, "model": n} for n in names]}
            ],
        },
        source="sketch_cost.toml",
    )
    store = InMemoryStatsStore(StatsConfig(), wall_clock=lambda: FIXED_WALL_S)
    router = kind(config, store, rng=random.Random(1))
    preferences = ProviderPreferences() if max_tokens else ProviderPreferences(max_ttft_s=((0.9, 5.0),))
    route = RouteRequest(config.models[0], "chat", True, 30, max_tokens, preferences)
    feed = answers(7, names)
    for _ in range(300):
        for candidate in router.plan(route).candidates:
            if router.attempt_started(candidate):
                answer = dataclasses.replace(next(feed), deployment=candidate.name, provider=candidate.provider.name)
                store.record(answer)
                router.attempt_finished(candidate, answer)
            break
    for answer in itertools.islice(feed, DEPLOYMENTS * WARM_SAMPLES):
        store.record(answer)
    return router, route, store


def best_us(work: Callable[[], object], calls: int, repeats: int) -> float:
    """Best µs per call of ``work`` over ``repeats`` runs of ``calls`` calls (process CPU time)."""
    return timed("", calls, work, repeats)[1]


def reads(store: InMemoryStatsStore) -> None:
    for summary in store.snapshot().summaries.values():
        for metric, quantiles in READS.items():
            histogram = summary.histograms[metric]
            for q in quantiles:
                histogram.quantile(q)


def rows(calls: int, repeats: int) -> list[tuple[str, float]]:
    _, _, store = build(BeliefRouter, "balanced", 256)
    feed = answers(11, [f"p{i}" for i in range(DEPLOYMENTS)])

    def record_reads() -> None:
        store.record(next(feed))
        reads(store)

    figures = [
        ("record", best_us(lambda: store.record(next(feed)), calls, repeats)),
        ("reads (5 dep. x 9)", best_us(lambda: reads(store), calls, repeats)),
        ("record + reads", best_us(record_reads, calls, repeats)),
    ]
    cases = [
        ("fastest-first-token", "fastest-first-token", 256),
        ("highest-throughput*", "highest-throughput", None),
        ("fastest-first-token*", "fastest-first-token", None),
    ]
    for label, policy, max_tokens in cases:
        figures += plan_rows(label, build(BeliefRouter, policy, max_tokens), feed, calls, repeats)
    return figures


def plan_rows(
    label: str, built: tuple[Any, RouteRequest, InMemoryStatsStore], feed: Iterator[Sample], calls: int, repeats: int
) -> list[tuple[str, float]]:
    """A warm router's ``plan`` alone (nothing changed: every quantile memoized), then after each record."""
    router, route, store = built

    def record_plan() -> None:
        store.record(next(feed))
        router.plan(route)

    return [
        (f"{label}: plan", best_us(lambda: router.plan(route), calls, repeats)),
        (f"{label}: record + plan", best_us(record_plan, calls, repeats)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    _, _, store = build(BeliefRouter, "balanced", 256)
    spread = {m: [len(s.histograms[m].counts) for s in store.snapshot().summaries.values()] for m in READS}
    print(f"buckets per deployment's total: {spread}")
    for name, us in rows(args.calls, args.repeats):
        print(f"{name:46} {us:8.2f} µs")
    print("* without max_tokens, with a TTFT p90 preference")


if __name__ == "__main__":
    main()
