"""A digest of every plan the router makes over simulated markets: run it before and after a change that must not
change a decision or a float, and compare the digests.

Each request of ``benchmarks.routing_simulate``'s markets (the real ``BeliefRouter`` on the simulation's clock) is
planned as the simulation plans it, and its plan is hashed: every candidate (reason, hedge, prediction, deadlines),
the race, the shadow, the session's decision, and the router's random state, counts and race budget after it. Before
it, the same router's beliefs are ranked (``rank_beliefs``: predictions, score parts, violations, beliefs, circuit,
load, capacity) for the request and under overrides and shapes the market never sends (each ``sort``, ``order``
with and without fallbacks, ``ignore``, ``max_price``, quantile preferences, a tools request, no ``max_tokens``, no
endpoint, embeddings), which draws with a generator of its own, so the plan's draws are not moved: the router's
arithmetic under every branch the market reaches.

    python -m benchmarks.plan_hash                        # stable, recovery, flaky, ... x 2 seeds
    python -m benchmarks.plan_hash --only stable --seeds 3 --verbose
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from collections.abc import Callable, Sequence

from benchmarks.routing_scenarios import SCENARIOS, STRESS, Scenario
from benchmarks.routing_simulate import Simulation
from gateway.errors import GatewayError
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_rank import rank_beliefs
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import RoutePlan
from gateway.routing.ranking import Ranking

MARKETS = ("stable", "recovery", "mixed-lengths", "flaky", "heavy-tail", "outage", "dip", "oscillate", "swap")


def _ranking(ranking: Ranking) -> str:
    counts = (ranking.requests, ranking.probes, ranking.races, ranking.shadows, ranking.cold_starts)
    return repr((ranking.shape, counts, ranking.extra_attempts, ranking.rows))


def _plan(plan: RoutePlan) -> str:
    return repr((plan.candidates, plan.race, plan.affinity, plan.shadow))


def _variants(router: BeliefRouter, request: RouteRequest) -> list[str]:
    """The request ranked, then under other overrides and shapes (``rank_beliefs`` draws with a generator of its
    own: no draw of the router's)."""
    model = request.model
    names = [d.name for d in model.deployments]
    preferences = [
        ProviderPreferences(sort="price"),
        ProviderPreferences(sort="throughput"),
        ProviderPreferences(sort="latency"),
        ProviderPreferences(order=(names[-1],)),
        ProviderPreferences(order=(names[-1],), allow_fallbacks=False),
        ProviderPreferences(allow_fallbacks=False),
        ProviderPreferences(ignore=(names[0],)),
        ProviderPreferences(max_price_out=1.0),
        ProviderPreferences(min_tokens_per_s=((0.5, 80.0),), max_ttft_s=((0.9, 0.5),)),
    ]

    def tools() -> Ranking:
        return rank_beliefs(router, model, endpoint="chat", prompt_tokens=2000, kind="tools")

    out = []
    calls: list[Callable[[], Ranking]] = [
        lambda: rank_beliefs(
            router,
            model,
            endpoint=request.endpoint,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            preferences=request.preferences,
        ),
        *(
            lambda p=p: rank_beliefs(router, model, endpoint="chat", prompt_tokens=900, preferences=p)
            for p in preferences
        ),
        # Twice, as when it was ranked as a session's turn bound and unbound (which the ranking never read): the
        # digest as it was.
        tools,
        tools,
        lambda: rank_beliefs(router, model, prompt_tokens=50),
        lambda: rank_beliefs(router, model, endpoint="embeddings", prompt_tokens=50, max_tokens=1),
        lambda: rank_beliefs(router, model, endpoint="chat", prompt_tokens=50, max_tokens=64, kind="json"),
    ]
    for call in calls:
        try:
            out.append(_ranking(call()))
        except GatewayError as error:
            out.append(f"{type(error).__name__}: {error}")
    return out


def digest(scenarios: Sequence[Scenario], seeds: Sequence[int], verbose: bool = False) -> str:
    total = hashlib.sha256()
    original = BeliefRouter.plan
    plans = 0

    def hashed(self: BeliefRouter, request: RouteRequest) -> RoutePlan:
        nonlocal plans
        for text in _variants(self, request):
            step.update(text.encode())
        try:
            plan = original(self, request)
        except GatewayError as error:
            step.update(f"{type(error).__name__}: {error}".encode())
            raise
        step.update(_plan(plan).encode())
        step.update(repr((self.rng.getstate(), self.counts, self.budget)).encode())
        plans += 1
        return plan

    BeliefRouter.plan = hashed  # type: ignore[method-assign]
    logging.disable(logging.WARNING)  # the markets' circuit and limit warnings
    try:
        for scenario in scenarios:
            for seed in seeds:
                step = hashlib.sha256()
                before = plans
                Simulation(scenario, seed, "gateway", None).run()
                total.update(step.digest())
                if verbose:
                    print(f"{scenario.name:16} seed {seed}: {plans - before:5d} plans  {step.hexdigest()[:16]}")
    finally:
        BeliefRouter.plan = original  # type: ignore[method-assign]
        logging.disable(logging.NOTSET)
    return f"{plans} plans  {total.hexdigest()}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", action="append", help="a market's name (repeatable)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--verbose", action="store_true", help="each market and seed's digest")
    args = parser.parse_args(argv)
    names = args.only or MARKETS
    by_name = {s.name: s for s in (*SCENARIOS, *STRESS)}
    print(digest([by_name[n] for n in names], range(1, args.seeds + 1), args.verbose))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
