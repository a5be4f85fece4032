"""What serving the belief router adds to its plan, and what explaining it costs.

``LiveBeliefRouter`` (``gateway.routing.belief_live``) wraps ``BeliefRouter.plan`` with what the live
gateway reads (demand per model, the session's affinity report); a plan that asks for its trace also
ranks every deployment with its chance of being best (``gateway.routing.belief_rank``). Both routers
are warmed as ``benchmarks.hotpath`` warms them (five deployments, forty answers each) and timed
interleaved, so the figures that matter are the ratios within one run::

    python -m benchmarks.belief_serving
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from benchmarks.hotpath import warm_router
from gateway.routing import RouteRequest
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.routing.belief_router import BeliefRouter

ROUNDS = 7
PLANS = 2000


def _per_plan_us(router: Any, request: RouteRequest, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        router.plan(request)
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    base, request = warm_router(kind=BeliefRouter)
    live, live_request = warm_router(kind=LiveBeliefRouter)
    assert isinstance(live, LiveBeliefRouter)
    plain, served = [], []
    for _ in range(ROUNDS):
        plain.append(_per_plan_us(base, request, PLANS))
        served.append(_per_plan_us(live, live_request, PLANS))
    traced = _per_plan_us(live, dataclasses.replace(live_request, explain=True), PLANS // 20)
    started = time.perf_counter()
    for _ in range(PLANS // 20):
        live.rank(live_request.model)
    rank_us = (time.perf_counter() - started) / (PLANS // 20) * 1e6
    b, s = statistics.median(plain), statistics.median(served)
    print(f"BeliefRouter.plan      {b:8.1f} us")
    print(f"LiveBeliefRouter.plan  {s:8.1f} us  ({s / b:.3f}x)")
    print(f"  with its trace       {traced:8.1f} us  ({traced / b:.1f}x)")
    print(f"LiveBeliefRouter.rank  {rank_us:8.1f} us  ({rank_us / b:.1f}x)")


if __name__ == "__main__":
    main()
