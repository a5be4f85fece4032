"""A look's worth against its cost (``gateway.routing.worth``) and the pace it is counted by (``choose.Budget``)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from gateway.routing.belief import HAZARD_S, Belief
from gateway.routing.belief_runs import mix
from gateway.routing.choose import RACE_BUDGET, Budget, Option, choose, mean_costs
from gateway.routing.cost import Shape, cost
from gateway.routing.priors import DRIFT, MEMORY, Prior, pooled
from gateway.routing.worth import look_cost, news_in_s, news_s, race_time, worth
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
        expected = max(expected, taken / (DRIFT + (landing_var + distance2) / HAZARD_S))
    assert news_s(belief, prior, 100.0) == pytest.approx(expected, rel=1e-12)


def test_news_lasts_longer_for_a_thin_or_stale_belief_than_a_well_measured_fresh_one() -> None:
    other = _measured(0.9, 120.0)
    prior = pooled([other], 100.0)
    thin, settled = _measured(0.4, 200.0, n=3), _measured(0.4, 200.0, n=200)
    assert news_s(thin, prior, 100.0) > 3 * news_s(settled, prior, 100.0)
    assert news_s(settled, prior, 100.0 + HAZARD_S) > 3 * news_s(settled, prior, 100.0)
    assert news_s(Belief(), prior, 100.0) == HAZARD_S


def test_a_look_costs_its_bill_beside_the_leaders_and_a_race_its_time() -> None:
    shape = Shape(20, 256)
    lead, same = (
        cost(b.expected(100.0), d, shape, WEIGHTS)
        for b, d in zip([_measured(0.4, 200.0), _measured(0.5, 180.0)], _deployments(2), strict=True)
    )
    assert look_cost(same, lead, WEIGHTS, None) == pytest.approx(WEIGHTS.price, rel=0.02)  # the bill doubled
    dear = same._replace(money_usd=2 * lead.money_usd)
    assert look_cost(dear, lead, WEIGHTS, None) == pytest.approx(WEIGHTS.price * math.log2(3), rel=0.02)
    saved = look_cost(same, lead, WEIGHTS, 0.8 * lead.time_s)
    assert saved == pytest.approx(look_cost(same, lead, WEIGHTS, None) + WEIGHTS.time * math.log2(0.8))
    assert look_cost(same, lead, replace(WEIGHTS, price=0.0), None) == 0.0


def test_a_races_time_is_the_earlier_first_token_and_the_winners_stream() -> None:
    """``race_time`` against a simulated race of two log-normal first tokens (each cost's mean, its spread)."""
    shape = Shape(20, 256)
    beliefs = [_measured(0.5, 200.0, sigma=0.5), _measured(0.4, 150.0, sigma=0.5)]
    options = [Option(d, b, Prior()) for d, b in zip(_deployments(2), beliefs, strict=True)]
    lead, e = mean_costs(options, shape, WEIGHTS, 100.0)
    want = race_time(beliefs[1], Prior(), beliefs[0], Prior(), e, lead, 100.0)
    s_e, s_l = beliefs[1].expected(100.0, Prior()).spread[0], beliefs[0].expected(100.0, Prior()).spread[0]
    rng, total, n = random.Random(7), 0.0, 200_000
    for _ in range(n):
        t_e = e.ttft_s * math.exp(rng.gauss(0, s_e) - s_e * s_e / 2)
        t_l = lead.ttft_s * math.exp(rng.gauss(0, s_l) - s_l * s_l / 2)
        total += t_e + e.time_s - e.ttft_s if t_e < t_l else t_l + lead.time_s - lead.ttft_s
    assert want == pytest.approx(total / n, rel=0.01)


def test_the_pace_is_the_mean_gap_so_far_then_of_about_the_last_memory() -> None:
    budget = Budget()
    budget.credit("m")
    budget.credit("m")
    assert budget.pace("m") is None  # no time told: unknown
    budget.credit("m", 0.0)
    assert budget.pace("m") is None
    budget.credit("m", 1.0)
    budget.credit("m", 4.0)
    assert budget.pace("m") == pytest.approx(1 / 2.0)  # gaps 1 and 3
    for i in range(10 * MEMORY):
        budget.credit("m", 5.0 + 0.1 * i)
    assert budget.pace("m") == pytest.approx(10.0, rel=1e-3)


def _looks_over(options: list[Option], requests: int, pace: float, start: float) -> int:
    rng, budget = random.Random(3), Budget()
    looks = 0
    for k in range(requests):
        now = start + k / pace
        budget.credit("m", now)
        choice = choose(options, Shape(20, 256), WEIGHTS, now, rng, may_race=True, budget=budget, model="m")
        looks += bool(choice.race) or choice.shadow is not None
    return looks


def test_a_settled_pair_heard_a_moment_ago_is_not_looked_at_the_budgets_share() -> None:
    """Two near-equal deployments, both heard just now, at twenty requests a second: a change since is unlikely and
    a look would find it only as much sooner than the next (``news_in_s``), so no look pays its bill over two
    seconds, where the budget alone would look at a tenth of them. The first stream looks as the budget does: no
    pace is known yet."""
    options = _pooled([_measured(0.4, 200.0, n=200), _measured(0.42, 195.0, n=200)], 100.0)
    looks = _looks_over(options, 40, 20.0, 100.0)
    assert looks == 1 < 40 * RACE_BUDGET


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
