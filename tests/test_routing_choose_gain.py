"""The look's knowledge gradient (``choose.gain``) and a belief's draw, made cheap, still the numbers they were.

``gain`` finds once per look what no draw changes; ``_reference_gain`` below is the plain form it replaced (one
``Draw`` and one ``Cost`` per draw, the posterior mean from the branches as they are), kept here to hold the fast
one to it exactly: the same random numbers in the same order and the same arithmetic, so a plan's decisions, and
the simulator's figures for a seed, do not move."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from gateway.policies import BUILTIN_POLICIES
from gateway.routing.belief import Belief
from gateway.routing.belief_failures import FAIL_PRIOR
from gateway.routing.belief_look import GAIN_DRAWS
from gateway.routing.choose import Option, gain
from gateway.routing.cost import Cost, Shape, Weights, cost, scores
from gateway.routing.draws import Draw, normal_pair
from gateway.routing.priors import DRIFT, Prior, pooled
from tests.test_routing_belief_plan_same import Branches, branches
from tests.test_routing_choose import _deployments


def _reference_gain(
    option: Option, leader: Cost, shape: Shape, weights: Weights, now: float, rng: random.Random
) -> float:
    belief = option.belief
    plain = branches(belief, now, option.prior)
    chance = (sum(c[0] for c in plain if not c[3]), sum(c[0] for c in plain if c[3]))
    spread2 = [s * s for s in belief.spread()]
    total = 0.0
    for k in range(GAIN_DRAWS):
        branch = k % 2
        draw = _reference_draw(belief, now, rng, option.prior, branch == 1)
        answer = [math.log(v) + rng.gauss(0.0, math.sqrt(spread2[m])) for m, v in enumerate(draw.levels)]
        moved = _reference_mean(plain, answer, spread2)
        drawn = cost(draw._replace(ttft_s=moved[0], s_per_token=moved[1]), option.deployment, shape, weights)
        mine, theirs = scores([drawn, leader], weights)
        total += max(0.0, theirs - mine) * chance[branch]
    return 2 * total / GAIN_DRAWS


def _reference_draw(belief: Belief, now: float, rng: random.Random, prior: Prior, changed: bool) -> Draw:
    changed = changed or not belief.runs
    runs = belief._new_runs(prior) if changed else belief.runs
    pick = rng.random()
    run = runs[-1]
    for candidate in runs:
        pick -= candidate.weight
        if pick <= 0:
            run = candidate
            break
    age = DRIFT * (now - belief.heard_at) if belief.heard_at is not None else 0.0
    ttft = rng.gauss(run.mean0, math.sqrt(run.var0 + age))
    spt = rng.gauss(run.mean1, math.sqrt(run.var1 + age))
    a, b = FAIL_PRIOR if changed else belief.failure(now)
    mean = a / (a + b)
    failure = min(0.99, max(0.0, rng.gauss(mean, math.sqrt(mean * (1 - mean) / (a + b + 1)))))
    levels = (math.exp(ttft), math.exp(spt))
    return Draw(*levels, failure, belief.spread(), belief.failures.failure_s, changed, levels)


def test_a_draw_is_the_reference_draw_exactly() -> None:
    for seed in range(8):
        for belief in _beliefs(seed):
            for changed in (None, False, True):
                now, prior = 50.0 + 30 * seed, Prior((0.1, -4.0), (0.5, 0.5))
                fast, slow = random.Random(seed), random.Random(seed)
                got = belief.draw(now, fast, prior, changed)
                flip = slow.random() < belief.changed(now) if changed is None else changed
                assert got == _reference_draw(belief, now, slow, prior, flip)
                assert fast.random() == slow.random()


def _reference_mean(branches: Branches, answer: list[float], spread2: list[float]) -> tuple[float, float]:
    logs = []
    for weight, means, variances, _ in branches:
        log_p = math.log(max(weight, 1e-12))
        for m in (0, 1):
            v = variances[m] + spread2[m]
            log_p -= 0.5 * ((answer[m] - means[m]) ** 2 / v + math.log(v))
        logs.append(log_p)
    top = max(logs)
    odds = [math.exp(x - top) for x in logs]
    total = sum(odds)
    moved = []
    for m in (0, 1):
        value = 0.0
        for (_, means, variances, _), w in zip(branches, odds, strict=True):
            learn = variances[m] / (variances[m] + spread2[m])
            value += w / total * (means[m] + learn * (answer[m] - means[m]))
        moved.append(math.exp(value))
    return moved[0], moved[1]


def _beliefs(seed: int) -> list[Belief]:
    """Four deployments heard in odd ways: a steady one, a jumpy one (several runs), one with censored evidence and
    failures, and one never heard."""
    rng = random.Random(seed)
    beliefs = [Belief() for _ in range(4)]
    now = 0.0
    for step in range(rng.randint(5, 80)):
        now += rng.expovariate(2.0)
        jump = 4.0 if step % 17 > 11 else 1.0
        beliefs[0].observe(now, Prior(), 0.3 * math.exp(rng.gauss(0, 0.2)), 0.01 * math.exp(rng.gauss(0, 0.2)))
        beliefs[1].observe(now, Prior(), jump * math.exp(rng.gauss(0, 0.6)), 0.02 * jump, uncached_tokens=2000)
        if step % 3:
            beliefs[2].observe(now, Prior(), at_least=(rng.uniform(0.1, 3.0), None))
        beliefs[2].failed(now, rng.random() < 0.3, rng.uniform(0.1, 2.0))
    return beliefs


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["balanced", "fastest-first-token", "cheapest"])
def test_the_fast_gain_is_the_reference_gain_exactly(seed: int, policy: str) -> None:
    beliefs = _beliefs(seed)
    now = 60.0 + seed * 37.0  # some long unheard: the changed branch weighs
    prior = pooled(beliefs, now)
    deployments = _deployments(len(beliefs))
    options = [Option(d, b, prior) for d, b in zip(deployments, beliefs, strict=True)]
    weights = Weights.of(BUILTIN_POLICIES[policy])
    shape = Shape(300 + seed, 64.0 + 40 * seed, {deployments[1].name: 100}, {deployments[2].name: 0.8})
    leader = cost(beliefs[0].expected(now, prior), deployments[0], shape, weights, beliefs[0].prefill_s())
    for option in options[1:]:
        fast, slow = random.Random(seed), random.Random(seed)
        got = gain(option, leader, shape, weights, now, fast)
        want = _reference_gain(option, leader, shape, weights, now, slow)
        assert got == want
        assert fast.random() == slow.random()  # the same random numbers used, none more


@pytest.mark.parametrize("seed", range(4))
def test_a_look_leaves_gauss_as_its_calls_would(seed: int) -> None:
    """``gain`` makes its normals as ``rng.gauss`` does (``standard_normals``): a pair's kept half before the
    look is used by it, and one it leaves is the next ``gauss``'s."""
    beliefs = _beliefs(seed)
    now = 90.0 + seed * 41.0
    prior = pooled(beliefs, now)
    deployments = _deployments(len(beliefs))
    weights = Weights.of(BUILTIN_POLICIES["balanced"])
    shape = Shape(300, 200.0)
    leader = cost(beliefs[0].expected(now, prior), deployments[0], shape, weights, beliefs[0].prefill_s())
    fast, slow = random.Random(seed), random.Random(seed)
    for rng in (fast, slow):
        rng.gauss(0.0, 1.0)  # a normal kept over
    for d, b in zip(deployments[1:], beliefs[1:], strict=True):
        got = gain(Option(d, b, prior), leader, shape, weights, now, fast)
        assert got == _reference_gain(Option(d, b, prior), leader, shape, weights, now, slow)
        assert fast.gauss(0.0, 1.0) == slow.gauss(0.0, 1.0)  # leaves one kept over, then none, then one...
    assert fast.random() == slow.random()


def standard_normals(uniform: Callable[[], float], carry: float | None, count: int) -> list[float]:
    """At least ``count`` standard normals as that many ``random.Random.gauss`` calls make them after one that left
    ``carry``; an odd one over is last (the next carry)."""
    normals = [] if carry is None else [carry]
    while len(normals) < count:
        cosine, sine = normal_pair(uniform)
        normals.append(cosine)
        normals.append(sine)
    return normals


def test_standard_normals_are_gauss_exactly() -> None:
    for seed in range(6):
        fast, slow = random.Random(seed), random.Random(seed)
        carry = None
        for count in (5, 1, 2, 5, 3, 4):
            normals = standard_normals(fast.random, carry, count)
            assert normals[:count] == [slow.gauss(0.0, 1.0) for _ in range(count)]
            carry = normals[count] if len(normals) > count else None
        assert carry == vars(slow)["gauss_next"]


def test_the_reference_holds_the_fast_gain_to_something() -> None:
    """The equality above is not of zeros: most of those looks may teach something."""
    beliefs = _beliefs(3)
    prior = pooled(beliefs, 171.0)
    deployments = _deployments(len(beliefs))
    weights = Weights.of(BUILTIN_POLICIES["balanced"])
    shape = Shape(300, 200.0)
    leader = cost(beliefs[0].expected(171.0, prior), deployments[0], shape, weights)
    gains = [
        gain(Option(d, b, prior), leader, shape, weights, 171.0, random.Random(1))
        for d, b in zip(deployments[1:], beliefs[1:], strict=True)
    ]
    assert sum(g > 0 for g in gains) >= 2


def _reference_scores(costs: list[Cost], weights: Weights) -> list[float]:
    times = sorted(range(len(costs)), key=lambda i: costs[i].time_s)
    epsilon = max((c.money_usd for c in costs), default=0.0) * 0.01 + 1e-12
    result = []
    for i, c in enumerate(costs):
        others = [j for j in times[:2] if j != i]
        fallback = costs[others[0]].time_s if others else c.time_s
        expected = (1 - c.failure) * c.time_s + c.failure * (c.failure_s + fallback)
        value = weights.time * math.log2(expected)
        if weights.ttft:
            value += weights.ttft * math.log2(c.ttft_s)
        if weights.throughput:
            value += weights.throughput * math.log2(c.s_per_token)
        value += weights.price * math.log2(c.money_usd + epsilon)
        good = max(1.0 - c.failure, 0.01) * max(c.valid, 0.01) ** weights.quality
        value += weights.failure * math.log2(1.0 / good)
        result.append(value)
    return result


@pytest.mark.parametrize("policy", ["balanced", "fastest-first-token", "cheapest", "highest-throughput"])
def test_scores_are_the_reference_scores_exactly(policy: str) -> None:
    """One cost, two, many, and ties on time (the quickest other is the fallback, whichever of equals)."""
    rng = random.Random(policy)
    weights = Weights.of(BUILTIN_POLICIES[policy])
    for n in (1, 2, 3, 5, 8):
        for _ in range(50):
            times = [rng.choice((1.0, 2.0, rng.uniform(0.1, 9.0))) for _ in range(n)]
            costs = [
                Cost(
                    rng.uniform(0.05, 2),
                    rng.uniform(0.001, 0.05),
                    t,
                    rng.uniform(0, 1e-3),
                    rng.random() / 2,
                    rng.uniform(0, 3),
                    False,
                    rng.uniform(0.5, 1),
                )
                for t in times
            ]
            assert scores(costs, weights) == _reference_scores(costs, weights)
