"""The routing benchmark's scenarios in simulated time: the real router, no processes, seconds per run.

A discrete-event simulation of ``benchmarks/routing_scenarios.py``: Poisson arrivals, each
request planned by the real router (``BeliefRouter``) over a real in-memory stats store (both on the
simulation's clock), attempts drawn from the scenario's profiles (log-normal first token and
speed, failures as instant 503s), fallback, hedges, races and shadows as the relay runs them, and
every attempt's sample delivered to the router when that attempt ends. No HTTP, no CPU noise:
for iterating on routing decisions; ``benchmarks/routing.py`` is the measurement.

The oracles do not ask the router: each request goes straight to the oracle's choice (the fastest provider, or
the one the policy's score picks knowing the truth), with no look, race, shadow or hedge beside it, and on a
failure to the fastest of the others (``_Oracle``).

Two source trees are compared by running the simulator twice, each with its own tree first on the path, writing
each run's regrets per market and seed (``--json``), then pairing the two files (``--pair``): the same schedules
and the same draws, so the difference is the routers'.

Usage::

    python -m benchmarks.routing_simulate                # every scenario, 3 seeds
    python -m benchmarks.routing_simulate --only recovery --seeds 10
    python -m benchmarks.routing_simulate --stress --seeds 16  # markets nothing was tuned on
    python -m benchmarks.routing_simulate --held-out-9        # a held-out set (1-13; --held-out: the first); sets
                                                              # 1-11 are seen, sets 12 and 13 each run once, at the end
    PYTHONPATH=<base tree> python -m benchmarks.routing_simulate --seeds 64 --json base.json
    PYTHONPATH=<new tree> python -m benchmarks.routing_simulate --seeds 64 --json new.json
    python -m benchmarks.routing_simulate --pair base.json new.json  # new − base, paired, as a markdown table
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import heapq
import itertools
import json
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.routing_held_out import HELD_OUT_2
from benchmarks.routing_held_out_3 import HELD_OUT_3
from benchmarks.routing_held_out_4 import HELD_OUT_4
from benchmarks.routing_held_out_5 import HELD_OUT_5
from benchmarks.routing_held_out_6 import HELD_OUT_6
from benchmarks.routing_held_out_7 import HELD_OUT_7
from benchmarks.routing_held_out_8 import HELD_OUT_8
from benchmarks.routing_held_out_9 import HELD_OUT_9
from benchmarks.routing_held_out_10 import HELD_OUT_10
from benchmarks.routing_held_out_11 import HELD_OUT_11
from benchmarks.routing_held_out_12 import HELD_OUT_12
from benchmarks.routing_held_out_13 import HELD_OUT_13
from benchmarks.routing_held_out_14 import HELD_OUT_14
from benchmarks.routing_scenarios import HELD_OUT, SCENARIOS, STRESS, Profile, Scenario, oracle_choice
from gateway.config import GatewayConfig, StatsConfig, parse_config
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate, RoutePlan, Router
from gateway.routing.worth import DRAIN_EVENTS, DRAIN_MAX_S
from gateway.samples import Outcome, Sample
from gateway.stats import InMemoryStatsStore

MARKETS: dict[int, Sequence[Scenario]] = {
    1: HELD_OUT,
    2: HELD_OUT_2,
    3: HELD_OUT_3,
    4: HELD_OUT_4,
    5: HELD_OUT_5,
    6: HELD_OUT_6,
    7: HELD_OUT_7,
    8: HELD_OUT_8,
    9: HELD_OUT_9,
    10: HELD_OUT_10,
    11: HELD_OUT_11,
    12: HELD_OUT_12,
    13: HELD_OUT_13,
    14: HELD_OUT_14,
}
"""The held-out sets by number (``--held-out-N``; ``--held-out`` is the first)."""
HELD_OUT_SETS = (
    ("first", "routing_scenarios.HELD_OUT"),
    ("second", "routing_held_out.HELD_OUT_2"),
    *(
        (ordinal, f"routing_held_out_{n}.HELD_OUT_{n}")
        for n, ordinal in enumerate(
            "third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth".split(), 3
        )
    ),
)
"""Each set's ordinal and where it is written, for ``--help``."""
WALL = 1_000_000.0
FAIL_S = 0.005
BYTES_PER_EVENT = 150
"""An OpenAI chat chunk of one token, about."""


def _config(scenario: Scenario, policy: dict[str, Any] | None) -> GatewayConfig:
    data: dict[str, Any] = {
        "providers": [{"name": p.name, "base_url": f"http://127.0.0.1:9/{p.name}"} for p in scenario.providers],
        "models": [
            {
                "name": "m",
                **({"policy": "p"} if policy else {}),
                "deployments": [
                    {"provider": p.name, "model": p.name, "price_in": p.price, "price_out": p.price}
                    for p in scenario.providers
                ],
            }
        ],
    }
    if policy:
        data["policies"] = {"p": policy}
    return parse_config(data, source="sim.toml")


@dataclass
class Result:
    times: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    on_best: list[tuple[float, bool]] = field(default_factory=list)
    failed: int = 0
    attempts: int = 0
    money: float = 0.0
    """What every attempt was billed (USD): answers, drained probes, and the prompts of those cancelled."""


PROMPT_TOKENS = 20
"""Every simulated request's prompt."""


ORACLES = ("oracle", "policy-oracle")


class _Oracle:
    """What the attempt loop asks of a router, for an oracle's requests: every attempt may start, nothing is learned,
    no hedge is started (the oracle's choice is already the right one)."""

    def attempt_started(self, candidate: Candidate, *, retry: bool = False) -> bool:
        return True

    def attempt_finished(self, candidate: Candidate, sample: Sample) -> None:
        pass

    def attempt_streaming(self, candidate: Candidate, progress: Any) -> None:
        pass

    def try_hedge(self, plan: RoutePlan) -> bool:
        return False


class Simulation:
    """One scenario, one seed, one strategy: "gateway" (the router plans every request); "oracle", the fastest
    provider for each request; or "policy-oracle", the one the policy's score picks knowing the truth (the oracles
    bypass the router: ``_Oracle``)."""

    def __init__(self, scenario: Scenario, seed: int, strategy: str, policy: dict[str, Any] | None = None) -> None:
        self.scenario = scenario
        self.seed = seed
        self.strategy = strategy
        self.now = 0.0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.counter = itertools.count()
        self.config = _config(scenario, policy)
        self.store = InMemoryStatsStore(StatsConfig(), wall_clock=lambda: WALL + self.now, replica="replica-0")
        # Replicas share the window and the answers' log (one store) and keep their own state; each records under
        # its own replica id, as a process would. The first keeps the seed's own rng.
        stores = [self.store, *(self.store.as_replica(f"replica-{i}") for i in range(1, scenario.replicas))]
        self.routers: list[BeliefRouter] = [
            BeliefRouter(self.config, stores[i], rng=random.Random(seed if i == 0 else f"{seed}:{i}"), clock=self.clock)
            for i in range(scenario.replicas)
        ]
        self.oracle = _Oracle()
        self.stores: dict[int, InMemoryStatsStore] = {id(r): s for r, s in zip(self.routers, stores, strict=True)}
        """Each replica's router's store (``sample`` records there); an oracle's requests record in the first."""
        self.stores[id(self.oracle)] = self.store
        self.router = self.routers[0]
        self.result = Result()
        policy_config = self.config.policy_for(self.config.models[0])
        self.price_weight = policy_config.price_weight / max(policy_config.time_weight, 1e-9)

    def clock(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.counter), action))

    def run(self) -> Result:
        for planned in self.scenario.schedule(self.seed):
            self.at(
                planned.at_s,
                functools.partial(self.arrive, planned.at_s, planned.tokens, planned.index, planned.ceiling),
            )
        while self.events:
            when, _, action = heapq.heappop(self.events)
            self.now = when
            action()
        return self.result

    def profile(self, name: str) -> Profile:
        return self.scenario.profiles_at(self.now)[name]

    def arrive(self, started: float, tokens: int, index: int = 0, ceiling: int | None = None) -> None:
        profiles = list(self.scenario.profiles_at(self.now).values())
        best = oracle_choice(tokens, profiles)
        if self.strategy in ORACLES:
            choice = best if self.strategy == "oracle" else oracle_choice(tokens, profiles, self.price_weight)
            _Request(self, self._oracle_plan(choice, tokens), tokens, started, best, index, self.oracle).start()
            return
        max_tokens = ceiling if ceiling is not None else tokens
        request = RouteRequest(self.config.models[0], "chat", True, PROMPT_TOKENS, max_tokens, ProviderPreferences())
        router = self.routers[index % len(self.routers)]
        plan = router.plan(request)
        _Request(self, plan, tokens, started, best, index, router).start()

    def _oracle_plan(self, choice: str, tokens: int) -> RoutePlan:
        """The oracle's choice first, then, should it fail, the others as its fallback is counted
        (``oracle_choice``): the fastest that never fails first. No hedge, race or shadow."""
        model = self.config.models[0]
        profiles = self.scenario.profiles_at(self.now)
        rest = sorted(
            (d for d in model.deployments if d.name != choice),
            key=lambda d: (profiles[d.name].error_rate > 0, profiles[d.name].expected_e2e(tokens)),
        )
        deployments = [next(d for d in model.deployments if d.name == choice), *rest]
        candidates = tuple(
            Candidate(d, self.config.provider(d.provider), "override" if i == 0 else "fallback", model.name)
            for i, d in enumerate(deployments)
        )
        return RoutePlan(candidates, self.config.policy_for(model))

    def sample(
        self,
        router: Router | _Oracle,
        candidate: Candidate,
        outcome: Outcome,
        ttft: float | None,
        tps: float | None,
        **extra: Any,
    ) -> None:
        sample = Sample(
            model="m",
            deployment=candidate.name,
            provider=candidate.provider.name,
            endpoint="chat",
            stream=True,
            outcome=outcome,
            started_at=WALL + self.now,
            ttft_s=ttft,
            tokens_per_s=tps,
            e2e_s=extra.get("e2e"),
            output_tokens=extra.get("tokens"),
            hedged=bool(extra.get("hedged")),
            status=extra.get("status"),
        )
        self.stores[id(router)].record(sample)
        router.attempt_finished(candidate, sample)
        if outcome != "upstream_error":  # billed: the prompt, and what was read of the answer
            tokens = int(extra.get("tokens") or 0)
            self.result.money += (PROMPT_TOKENS + tokens) * self.profile(candidate.name).price / 1e6


@dataclass
class _Progress:
    """A stream's bytes so far in simulated time (``StreamProgress``): the relay's meter, as the router reads it."""

    sim: Simulation
    first_at: float
    tps: float
    tokens: int

    api: str = "chat"

    @property
    def received_bytes(self) -> int:
        streamed = min(max(0, self.tokens - 1), max(0.0, self.sim.now - self.first_at) * self.tps)
        return BYTES_PER_EVENT * (1 + int(streamed))


class _Request:
    """The relay's attempt loop for one streamed request, in simulated time."""

    def __init__(
        self,
        sim: Simulation,
        plan: RoutePlan,
        tokens: int,
        started: float,
        best: str,
        index: int,
        router: Router | _Oracle,
    ) -> None:
        self.sim, self.plan, self.tokens, self.started, self.best = sim, plan, tokens, started, best
        self.index = index
        self.router = router
        self.queue = list(plan.candidates)
        self.attempts = 0
        self.done = False

    def start(self) -> None:
        shadow = getattr(self.plan, "shadow", None)  # older routers send none
        if shadow is not None and self.router.attempt_started(shadow):
            # Beside the first attempt and never the answer: drained (``Drains.shadow``).
            fails, ttft, tps = self.draw(shadow, "shadow")
            if fails:
                self._racer_fails(shadow)
            else:
                self._drain(shadow, self.sim.now, ttft, tps)
        self.next_attempt(hedge_allowed=True)

    def admit(self) -> Candidate | None:
        # A race of three or more keeps the fallbacks a one-probe race leaves the request (``AttemptBudget.extra``).
        extra = max(0, self.plan.race_width - 2) if getattr(self.plan, "race", ()) else 0
        while self.queue and self.attempts < self.plan.policy.max_attempts + extra:
            candidate = self.queue.pop(0)
            if self.router.attempt_started(candidate):
                self.attempts += 1
                return candidate
        return None

    def draw(self, candidate: Candidate, tag: str = "") -> tuple[bool, float, float]:
        p = self.sim.profile(candidate.name)
        # Common random numbers: request i draws the same on the same provider under every strategy (its n-th
        # attempt there, should it be tried there again), so strategies differ by their choices, not their luck.
        attempt = tag or self.attempts
        rng = random.Random(f"{self.sim.scenario.name}:{self.sim.seed}:{self.index}:{candidate.name}:{attempt}")
        fails = p.error_rate > 0 and rng.random() < p.error_rate
        ttft = p.ttft_s * rng.lognormvariate(0, p.ttft_sigma)
        tps = p.tps * rng.lognormvariate(0, p.tps_sigma)
        return fails, ttft, tps

    def next_attempt(self, hedge_allowed: bool) -> None:
        sim = self.sim
        race = getattr(self.plan, "race", ())  # older routers have none
        if hedge_allowed and race and self.plan.candidates[0].hedge_after_s == 0.0:
            self._race([])
            return
        primary = self.admit()
        if primary is None:
            self.fail()
            return
        fails, ttft, tps = self.draw(primary)
        t0 = sim.now
        if fails:
            sim.at(t0 + FAIL_S, lambda: self._failed(primary, hedge_allowed))
            return
        after = primary.hedge_after_s
        if hedge_allowed and after is not None and ttft > after:
            sim.at(t0 + after, lambda: self._hedge(primary, t0, ttft, tps))
            return
        self._commit_at(primary, t0, ttft, tps, hedged=False)

    def _race(self, racers: list[tuple[Candidate, float, bool, float, float]]) -> None:
        """The plan's racers as the relay runs them (``RoutePlan.race``): each joins when the one before it had its
        ``hedge_after_s`` without a first token (0: at once), the leader after the last, and the first token wins;
        the others are cancelled (a lower bound on their first token), or drained when they are probes. A racer
        that fails with none left running lets the next join at once."""
        sim = self.sim
        now = sim.now
        candidate = self.admit() if len(racers) < self.plan.race_width else None
        if candidate is None:
            if racers:
                self._race_ends(racers)
            else:
                self.fail()
            return
        racers.append((candidate, now, *self.draw(candidate)))
        if racers[-1][2]:
            self._racer_fails(candidate)
        after = candidate.hedge_after_s
        firsts = [start + ttft for _, start, fails, ttft, _ in racers if not fails]
        if after is None or (firsts and min(firsts) <= now + after):
            self._race_ends(racers)
            return
        join_at = now + after if firsts else now + FAIL_S
        sim.at(join_at, lambda: self._race(racers))

    def _racer_fails(self, candidate: Candidate) -> None:
        self.sim.at(
            self.sim.now + FAIL_S,
            functools.partial(
                self.sim.sample, self.router, candidate, "upstream_error", None, None, hedged=True, status=503
            ),
        )

    def _race_ends(self, racers: list[tuple[Candidate, float, bool, float, float]]) -> None:
        sim = self.sim
        ok = sorted(
            ((start + ttft, c, start, ttft, tps) for c, start, fails, ttft, tps in racers if not fails),
            key=lambda racer: racer[0],
        )
        if not ok:  # every racer failed: the plan's next candidate, as a fallback
            sim.at(max(start for _, start, *_ in racers) + FAIL_S, lambda: self.next_attempt(hedge_allowed=False))
            return
        first_at, winner, started, ttft, tps = ok[0]
        for _, loser, start, l_ttft, l_tps in ok[1:]:
            if self._drains(loser):
                self._drain(loser, start, l_ttft, l_tps)
                continue
            sim.at(
                first_at,
                functools.partial(
                    sim.sample, self.router, loser, "client_cancelled", first_at - start, None, hedged=True
                ),
            )
        self._commit_at(winner, started, ttft, tps, hedged=True)  # its first token is still to come: events ahead

    def _failed(self, candidate: Candidate, hedge_allowed: bool) -> None:
        self.sim.sample(
            self.router, candidate, "upstream_error", None, None, status=503, e2e=self.sim.now - self.started
        )
        self.next_attempt(hedge_allowed)

    def _hedge(self, primary: Candidate, t0: float, ttft: float, tps: float) -> None:
        sim = self.sim
        if not (self.queue and self.router.try_hedge(self.plan)):
            self._commit_at(primary, t0, ttft, tps, hedged=False)
            return
        hedge = self.admit()
        if hedge is None:
            self._commit_at(primary, t0, ttft, tps, hedged=False)
            return
        fails, h_ttft, h_tps = self.draw(hedge)
        if fails:
            sim.at(
                sim.now + FAIL_S,
                lambda: sim.sample(self.router, hedge, "upstream_error", None, None, hedged=True, status=503),
            )
            self._commit_at(primary, t0, ttft, tps, hedged=True)
            return
        primary_first = t0 + ttft
        hedge_first = sim.now + h_ttft
        if primary_first <= hedge_first:
            if self._drains(hedge):
                self._drain(hedge, sim.now, h_ttft, h_tps)
            else:
                sim.at(
                    primary_first, lambda: sim.sample(self.router, hedge, "client_cancelled", None, None, hedged=True)
                )
            self._commit_at(primary, t0, ttft, tps, hedged=True)
        else:
            waited = hedge_first - t0
            if self._drains(primary):
                self._drain(primary, t0, ttft, tps)
            else:
                sim.at(
                    hedge_first, lambda: sim.sample(self.router, primary, "client_cancelled", waited, None, hedged=True)
                )
            self._commit_at(hedge, sim.now, h_ttft, h_tps, hedged=True)

    def _drains(self, loser: Candidate) -> bool:
        """A losing probe, or a leader on trial, is read on to ``DRAIN_TOKENS`` unseen (``gateway.relay.drain``)."""
        return loser.drains if hasattr(loser, "drains") else loser.reason == "explore"  # older trees: probes

    def _drain(self, loser: Candidate, start: float, ttft: float, tps: float) -> None:
        tokens = min(self.tokens, DRAIN_EVENTS)
        end = start + ttft + min((tokens - 1) / tps, DRAIN_MAX_S)
        read = tokens if end < start + ttft + DRAIN_MAX_S else 1 + int(DRAIN_MAX_S * tps)
        sim = self.sim
        first = start + ttft
        progress = _Progress(sim, first, tps, tokens)
        sim.at(max(first, sim.now), lambda: self.router.attempt_streaming(loser, progress))
        sim.at(
            end,
            functools.partial(
                sim.sample,
                self.router,
                loser,
                "client_cancelled",
                ttft,
                tps if read > 1 else None,
                hedged=True,
                tokens=read,
            ),
        )

    def _commit_at(self, candidate: Candidate, t0: float, ttft: float, tps: float, hedged: bool) -> None:
        sim = self.sim
        end = t0 + ttft + max(0, self.tokens - 1) / tps
        first = t0 + ttft
        progress = _Progress(sim, first, tps, self.tokens)
        if hasattr(sim.router, "attempt_streaming"):  # older routers (a --before tree) do not read streams
            sim.at(max(first, sim.now), lambda: self.router.attempt_streaming(candidate, progress))

        def finish() -> None:
            e2e = sim.now - self.started
            sim.sample(
                self.router,
                candidate,
                "ok",
                ttft,
                self._read_tps(candidate, tps) if self.tokens > 1 else None,
                e2e=e2e,
                tokens=self.tokens,
                hedged=hedged,
            )
            sim.result.times.append(e2e)
            sim.result.ttfts.append(first - self.started)
            sim.result.on_best.append((self.started, candidate.name == self.best))
            sim.result.attempts += self.attempts

        sim.at(end, finish)

    def _read_tps(self, candidate: Candidate, tps: float) -> float:
        """The tokens/s the meter reads of an answer streamed at ``tps``: its window between first and last token
        strayed by the scenario's ``blur_s`` at each end (drawn per request and provider, common to every strategy),
        never below a tenth of a millisecond."""
        blur = self.sim.scenario.blur_s
        if not blur:
            return tps
        rng = random.Random(f"{self.sim.scenario.name}:{self.sim.seed}:{self.index}:{candidate.name}:blur")
        window = self.tokens / tps + blur * (rng.gauss(0.0, 1.0) - rng.gauss(0.0, 1.0))
        return self.tokens / max(window, 1e-4)

    def fail(self) -> None:
        self.sim.result.failed += 1


def simulate(scenario: Scenario, seed: int, strategy: str, policy: dict[str, Any] | None = None) -> Result:
    return Simulation(scenario, seed, strategy, policy).run()


def exploration(sim: Simulation) -> tuple[float, float]:
    """The share of requests that explored and the attempts per request beyond one, averaged over the replicas."""
    shares = [router.exploration(sim.config.models[0].name) for router in sim.routers]
    return statistics.fmean(s[0] for s in shares), statistics.fmean(s[1] for s in shares)


@dataclass
class Run:
    """One market, one schedule: the router's run against the two oracles' over the same arrivals and draws."""

    seed: int
    time_regret: float
    """Mean time over the fastest provider's for each request (the oracle's), minus one."""
    policy_regret: float
    """By the policy's own score, against the provider it would pick knowing the truth (``policy_regret``)."""
    explored: float
    extra_attempts: float
    result: Result = field(repr=False)

    def record(self) -> dict[str, float]:
        return {
            "seed": self.seed,
            "time_regret": self.time_regret,
            "policy_regret": self.policy_regret,
            "explored": self.explored,
            "extra_attempts": self.extra_attempts,
        }


def run(scenario: Scenario, seed: int, policy: dict[str, Any] | None) -> Run:
    fastest = simulate(scenario, seed, "oracle", policy)
    policy_sim = Simulation(scenario, seed, "policy-oracle", policy)
    best = policy_sim.run()
    sim = Simulation(scenario, seed, "gateway", policy)
    mine = sim.run()
    explored, extra = exploration(sim)
    regret = statistics.fmean(mine.times) / statistics.fmean(fastest.times) - 1
    return Run(seed, regret, policy_regret(mine, best, policy_sim.price_weight), explored, extra, mine)


def _summary(scenario: Scenario, runs: Sequence[Run]) -> str:
    regrets = [r.time_regret for r in runs]
    after, p99 = [], []
    for r in runs:
        mine = r.result
        p99.append(sorted(mine.ttfts)[int(0.99 * len(mine.ttfts))])
        if scenario.changes:
            at = scenario.changes[0].at_s + 15
            later = [ok for started, ok in mine.on_best if started >= at]
            after.append(sum(later) / max(1, len(later)))
    attempts = statistics.fmean(r.result.attempts / max(1, len(r.result.times)) for r in runs)
    text = (
        f"{scenario.name:16} regret {statistics.fmean(regrets):+6.1%} (min {min(regrets):+.1%} max {max(regrets):+.1%})"
        f"  policy {statistics.fmean(r.policy_regret for r in runs):+6.1%}"
        f"  explore {statistics.fmean(r.explored for r in runs):5.1%}  attempts {attempts:.2f}"
        f"  failed {sum(r.result.failed for r in runs)}  ttft p99 {statistics.fmean(p99):.2f}"
    )
    if after:
        text += f"  on best from +15 s {statistics.fmean(after):.0%} (min {min(after):.0%})"
    return text


def policy_regret(mine: Result, oracle: Result, price_weight: float) -> float:
    """How much worse the run scores than the policy's oracle, by the policy's own score (``gateway.policies``: log2 of
    time, plus ``price_weight`` × log2 of money), as the time that would score the same at the oracle's money: with no
    price weight, the mean time's regret. Failures count by the fallbacks' time, as in the time regret."""
    time = math.log2(statistics.fmean(mine.times) / statistics.fmean(oracle.times))
    money = math.log2(mine.money / oracle.money) if price_weight and mine.money > 0 and oracle.money > 0 else 0.0
    return 2 ** (time + price_weight * money) - 1


def _paired(new: Sequence[float], base: Sequence[float]) -> str:
    """The mean paired difference in points with its standard error, bold beyond two standard errors."""
    diffs = [n - b for n, b in zip(new, base, strict=True)]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    mean = statistics.fmean(diffs)
    text = f"{mean * 100:+.2f} ± {se * 100:.2f}"
    return f"**{text}**" if abs(mean) > 2 * se else text


PAIRED_HEADER = (
    "| market | base regret | new regret | new − base, time regret (points ± s.e.) "
    "| new − base, policy regret | base explored | new explored | new extra attempts/request |"
    "\n|---|---|---|---|---|---|---|---|"
)


def pair(base: dict[str, Any], new: dict[str, Any]) -> str:
    """The markdown table of two runs' files (``--json``): per market both have, the schedules both ran paired by
    seed; a difference beyond two standard errors in bold."""
    lines = [PAIRED_HEADER]
    for market, base_runs in base["markets"].items():
        new_runs = {r["seed"]: r for r in new["markets"].get(market, [])}
        both = [(b, new_runs[b["seed"]]) for b in base_runs if b["seed"] in new_runs]
        if not both:
            continue

        def column(side: int, key: str, rows: list[tuple[dict[str, float], dict[str, float]]] = both) -> list[float]:
            return [row[side][key] for row in rows]

        lines.append(
            f"| {market} | {statistics.fmean(column(0, 'time_regret')):+.1%} "
            f"| {statistics.fmean(column(1, 'time_regret')):+.1%} "
            f"| {_paired(column(1, 'time_regret'), column(0, 'time_regret'))} "
            f"| {_paired(column(1, 'policy_regret'), column(0, 'policy_regret'))} "
            f"| {statistics.fmean(column(0, 'explored')):.1%} | {statistics.fmean(column(1, 'explored')):.1%} "
            f"| {statistics.fmean(column(1, 'extra_attempts')):.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--policy", help="policy keys as JSON, e.g. '{\"memory_half_life_s\": 10}'")
    parser.add_argument("--stress", action="store_true", help="the stress markets (routing_scenarios.STRESS) instead")
    for number, (ordinal, where) in enumerate(HELD_OUT_SETS, start=1):
        flag = "--held-out" if number == 1 else f"--held-out-{number}"
        parser.add_argument(flag, action="store_true", help=f"the {ordinal} held-out set ({where}): once")
    parser.add_argument(
        "--blur-ms", type=float, default=0.0, help="every market's clock blur (Scenario.blur_s), in milliseconds"
    )
    parser.add_argument("--json", metavar="FILE", help="write each market's regrets per seed to FILE (for --pair)")
    parser.add_argument(
        "--pair", nargs=2, metavar=("BASE", "NEW"), help="two --json files: new − base per market, paired by seed"
    )
    args = parser.parse_args(argv)
    if args.pair:
        base, new = (json.loads(Path(name).read_text()) for name in args.pair)
        print(pair(base, new))
        return 0
    policy = json.loads(args.policy) if args.policy else None
    chosen = [n for n in range(1, len(HELD_OUT_SETS) + 1) if getattr(args, "held_out" if n == 1 else f"held_out_{n}")]
    markets = MARKETS[chosen[-1]] if chosen else STRESS if args.stress else SCENARIOS
    if args.blur_ms:
        markets = tuple(dataclasses.replace(scenario, blur_s=args.blur_ms / 1e3) for scenario in markets)
    records: dict[str, list[dict[str, float]]] = {}
    for scenario in markets:
        if args.only and scenario.name not in args.only:
            continue
        runs = [run(scenario, seed, policy) for seed in range(1, args.seeds + 1)]
        records[scenario.name] = [r.record() for r in runs]
        print(_summary(scenario, runs), flush=True)
    if args.json:
        written = {"seeds": args.seeds, "policy": policy, "blur_ms": args.blur_ms, "markets": records}
        Path(args.json).write_text(json.dumps(written, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
