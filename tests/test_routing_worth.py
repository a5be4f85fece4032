"""A look's worth against its cost (``gateway.routing.worth``) and the pace it is counted by (``choose.Budget``)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from gateway.routing.belief import Belief
from gateway.routing.belief_hazard import HAZARD_S
from gateway.routing.belief_runs import mix
from gateway.routing.choose import Budget, Option, choose, mean_costs
from gateway.routing.cost import Shape, cost
from gateway.routing.priors import DRIFT, MEMORY, Prior, pooled
from gateway.routing.worth import Race, drained_usd, look_cost, news_in_s, news_s, race_time, worth
from tests.test_routing_choose import WEIGHTS, _deployments, _measured


def _pooled(beliefs: list[Belief], now: float) -> list[Option]:
    deployments = _deployments(len(beliefs))
    return [
        Option(d, b, pooled([o for o in beliefs if o is not b], now)) for d, b in zip(deployments, beliefs, strict=True)
    ]


def test_news_is_the_variance_an_answer_takes_off_over_the_rate_it_grows_back() -> None:
    """Heard this moment (no chance of a change yet): one answer takes ``v² / (v + s²)`` off the level's variance,
    which grows back by ``DRIFT`` and the hazard's share of a landing; the longer of the two metrics'."""
    belief, other = _measured(0.4, 200.0, n=5), _measured(0.9, 120.0)
    prior = pooled([other], 100.0)
    expected = 0.0
    for metric in (0, 1):
        _, v = belief.level(100.0, metric)
        landing, landing_var = mix(belief._new_runs(prior), metric)
        distance2 = (belief.level(100.0, metric)[0] - landing) ** 2
        taken = v * v / (v + belief.spread2[metric])
        expected = max(expected, taken / (DRIFT + (landing_var + distance2) / belief.hazard.every_s))
    assert news_s(belief, prior, 100.0) == pytest.approx(expected, rel=1e-12)


def test_news_lasts_longer_for_a_thin_or_stale_belief_than_a_well_measured_fresh_one() -> None:
    other = _measured(0.9, 120.0)
    prior = pooled([other], 100.0)
    thin, settled = _measured(0.4, 200.0, n=3), _measured(0.4, 200.0, n=200)
    assert news_s(thin, prior, 100.0) > 3 * news_s(settled, prior, 100.0)
    assert news_s(settled, prior, 100.0 + HAZARD_S) > 3 * news_s(settled, prior, 100.0)
    assert news_s(Belief(), prior, 100.0) == HAZARD_S


def test_a_drained_attempt_is_billed_its_prompt_and_what_the_drain_reads() -> None:
    deployment = _deployments(1)[0]
    whole = cost(_measured(0.4, 200.0).expected(100.0), deployment, Shape(20, 256), WEIGHTS)
    per_token = deployment.price_out / 1e6
    assert drained_usd(whole, deployment, Shape(20, 256)) == pytest.approx(whole.money_usd - (256 - 64) * per_token)
    slow = whole._replace(s_per_token=1.0)  # a token a second: five seconds of its stream are read
    assert drained_usd(slow, deployment, Shape(20, 256)) == pytest.approx(whole.money_usd - (256 - 6) * per_token)
    short = cost(_measured(0.4, 200.0).expected(100.0), deployment, Shape(20, 30), WEIGHTS)
    assert drained_usd(short, deployment, Shape(20, 30)) == short.money_usd


def test_a_look_costs_its_drained_bill_beside_the_leaders_and_a_race_its_time() -> None:
    shape = Shape(20, 256)
    deployments = _deployments(2)
    beliefs = [_measured(0.4, 200.0), _measured(0.5, 180.0)]
    lead, same = (cost(b.expected(100.0), d, shape, WEIGHTS) for b, d in zip(beliefs, deployments, strict=True))
    drained = drained_usd(same, deployments[1], shape)
    shadow = look_cost(same, lead, drained, drained, WEIGHTS, None)
    assert shadow == pytest.approx(WEIGHTS.price * math.log2(1 + drained / lead.money_usd), rel=0.02)
    assert shadow < 0.5 * WEIGHTS.price  # a quarter of the answer read, not all of it
    dear = same._replace(money_usd=2 * same.money_usd)
    assert look_cost(dear, lead, 2 * drained, drained, WEIGHTS, None) == pytest.approx(
        WEIGHTS.price * math.log2(1 + 2 * drained / lead.money_usd), rel=0.02
    )
    # A race the explored one wins half the time: half its answer and the leader's drain, half its own drain.
    race = Race(0.8 * lead.time_s, 0.5)
    extra = 0.5 * (same.money_usd + drained - lead.money_usd) + 0.5 * drained
    assert look_cost(same, lead, drained, drained, WEIGHTS, race) == pytest.approx(
        WEIGHTS.price * math.log2(1 + extra / lead.money_usd) + WEIGHTS.time * math.log2(0.8), rel=0.02
    )
    assert look_cost(same, lead, drained, drained, replace(WEIGHTS, price=0.0), None) == 0.0


def test_a_races_time_is_the_earlier_first_token_and_the_winners_stream() -> None:
    """``race_time`` against a simulated race of two log-normal first tokens (each cost's mean, its spread)."""
    shape = Shape(20, 256)
    beliefs = [_measured(0.5, 200.0, sigma=0.5), _measured(0.4, 150.0, sigma=0.5)]
    options = [Option(d, b, Prior()) for d, b in zip(_deployments(2), beliefs, strict=True)]
    lead, e = mean_costs(options, shape, WEIGHTS, 100.0)
    want = race_time(beliefs[1], Prior(), beliefs[0], Prior(), e, lead, 100.0).time_s
    s_e, s_l = beliefs[1].expected(100.0, Prior()).spread[0], beliefs[0].expected(100.0, Prior()).spread[0]
    rng, total, n = random.Random(7), 0.0, 200_000
    for _ in range(n):
        t_e = e.ttft_s * math.exp(rng.gauss(0, s_e) - s_e * s_e / 2)
        t_l = lead.ttft_s * math.exp(rng.gauss(0, s_l) - s_l * s_l / 2)
        total += t_e + e.time_s - e.ttft_s if t_e < t_l else t_l + lead.time_s - lead.ttft_s
    assert want == pytest.approx(total / n, rel=0.01)


def test_the_pace_is_the_mean_gap_so_far_then_of_about_the_last_memory() -> None:
    budget = Budget()
    assert budget.pace("m") is None  # nothing heard: unknown
    budget.streamed("m", 0.0)
    assert budget.pace("m") is None
    budget.streamed("m", 1.0)
    budget.streamed("m", 4.0)
    assert budget.pace("m") == pytest.approx(1 / 2.0)  # gaps 1 and 3
    for i in range(10 * MEMORY):
        budget.streamed("m", 5.0 + 0.1 * i)
    assert budget.pace("m") == pytest.approx(10.0, rel=1e-3)


def _looks_over(options: list[Option], requests: int, pace: float, start: float) -> int:
    rng, budget = random.Random(3), Budget()
    looks = 0
    for k in range(requests):
        now = start + k / pace
        budget.streamed("m", now)
        choice = choose(options, Shape(20, 256), WEIGHTS, now, rng, may_race=True, budget=budget, model="m")
        looks += bool(choice.race) or choice.shadow is not None
    return looks


def test_a_look_at_a_settled_slower_one_pays_only_once_it_went_unheard_a_while() -> None:
    """A well-measured deployment with a slower stream, heard half a second ago, at twenty requests a second: a
    change since is unlikely and would be found only as much sooner as the next look would find it (``news_in_s``),
    so a look (a shadow) is worth less than its drained bill; ten seconds unheard, it pays. Counted over the level's
    whole life instead, the look would pay at once."""
    options = _pooled([_measured(0.6, 250.0, n=200), _measured(0.3, 60.0, n=200)], 100.0)
    shape, (lead, slow) = Shape(20, 256), options
    means = mean_costs(options, shape, WEIGHTS, 100.0)
    drained = drained_usd(means[1], slow.deployment, shape), drained_usd(means[0], lead.deployment, shape)
    bill = look_cost(means[1], means[0], *drained, WEIGHTS, None)

    def worth_at(now: float) -> float:
        costs = mean_costs(options, shape, WEIGHTS, now)
        draws = [
            worth(slow.belief, slow.prior, slow.deployment, costs[0], shape, WEIGHTS, now, random.Random(seed), 20.0)
            for seed in range(40)
        ]
        return sum(draws) / len(draws)

    assert worth_at(100.5) < 0.5 * bill
    assert worth_at(110.0) > bill


def test_a_deployment_unheard_for_long_is_looked_at() -> None:
    """One known slower but unheard for two of the hazard's means: it may well have changed, and a look pays."""
    leader, stale = _measured(0.4, 200.0, at=340.0), _measured(1.2, 80.0)
    options = _pooled([leader, stale], 340.0)
    assert news_in_s(stale, 340.0) >= 2 * HAZARD_S
    assert (
        worth(
            stale,
            options[1].prior,
            options[1].deployment,
            mean_costs(options, Shape(20, 256), WEIGHTS, 340.0)[0],
            Shape(20, 256),
            WEIGHTS,
            340.0,
            random.Random(1),
            1.0,
        )
        > WEIGHTS.price
    )
    assert _looks_over(options, 3, 1.0, 340.0) >= 1
