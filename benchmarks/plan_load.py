"""The belief router's plan with attempts in flight, as the server plans at load.

``benchmarks.hotpath --stages`` runs one request at a time, so its plans never find an attempt running. Here the
router (``hotpath.warm_router``) keeps ``--in-flight`` attempts open at its deployments: each cycle the oldest
one's answer arrives (recorded, then ``attempt_finished``), a plan is made and its first candidate started, as a
gateway at that concurrency does per request. With whole answers (the default) no attempt has a first token, so
each plan finds its deployment's running view stale and its longest wait past the expected first token (the
bounded copy, ``Belief.bounded``); ``--stream`` gives each attempt its first token as it starts.

    python -m benchmarks.plan_load                      # 1 deployment, 64 whole answers in flight
    python -m benchmarks.plan_load --deployments 5 --stream

Prints µs per plan (the plan alone) and per cycle (plan, start, answer recorded, finish), best of the repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from benchmarks.hotpath import _Progress, sample, warm_router
from gateway.stats import InMemoryStatsStore


def run(deployments: int, in_flight: int, stream: bool, plans: int, repeats: int) -> tuple[float, float]:
    """Best µs per plan and per cycle over ``repeats`` runs of ``plans`` cycles (CPU time of the process)."""
    router, route = warm_router(deployments)
    route = dataclasses.replace(route, stream=stream)
    store = router.stats
    assert isinstance(store, InMemoryStatsStore)
    running: list[Any] = []
    clock = time.process_time

    def finish_oldest() -> None:
        done = running.pop(0)
        answer = dataclasses.replace(
            sample(), deployment=done.name, provider=done.provider.name, stream=stream, ttft_s=0.0004
        )
        store.record(answer)
        router.attempt_finished(done, answer)

    def cycle(warming: bool = False) -> float:
        if len(running) >= in_flight:
            finish_oldest()
        started = clock()
        candidate = router.plan(route).candidates[0]
        spent = clock() - started
        while not router.attempt_started(candidate):
            if not warming or not running:
                raise RuntimeError("the benchmark's attempt was refused (capacity)")
            finish_oldest()  # the capacity's limit grows with answers at load, as a server's does
        if stream:
            router.attempt_streaming(candidate, _Progress())
        running.append(candidate)
        return spent

    for _ in range(max(1000, 20 * in_flight)):
        cycle(warming=True)
    if len(running) < in_flight:
        raise RuntimeError(f"only {len(running)} attempts in flight after warming (capacity)")
    best_plan, best_cycle = float("inf"), float("inf")
    for _ in range(repeats):
        planned = 0.0
        started = clock()
        for _ in range(plans):
            planned += cycle()
        best_cycle = min(best_cycle, (clock() - started) / plans)
        best_plan = min(best_plan, planned / plans)
    return best_plan * 1e6, best_cycle * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--deployments", type=int, default=1, help="deployments of the model (1)")
    parser.add_argument("--in-flight", type=int, default=64, help="attempts kept open (64)")
    parser.add_argument("--stream", action="store_true", help="each attempt streams (its first token at its start)")
    parser.add_argument("--plans", type=int, default=2000, help="cycles per repeat (2000)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats, best of (5)")
    args = parser.parse_args()
    plan_us, cycle_us = run(args.deployments, args.in_flight, args.stream, args.plans, args.repeats)
    kind = "streams" if args.stream else "whole answers"
    print(
        f"{args.deployments} dep., {args.in_flight} {kind} in flight: plan {plan_us:7.2f} µs, cycle {cycle_us:7.2f} µs"
    )


if __name__ == "__main__":
    main()
