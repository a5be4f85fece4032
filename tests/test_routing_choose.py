"""The choice (``gateway.routing.choose``, ``cost``, ``lengths``) on hand-made beliefs: one draw per request."""

from __future__ import annotations

import math
import random

import pytest

from gateway.config import DeploymentConfig, parse_config
from gateway.policies import BUILTIN_POLICIES
from gateway.routing.belief import Belief
from gateway.routing.belief_hazard import HAZARD_S
from gateway.routing.belief_look import look_terms, posterior_mean
from gateway.routing.choose import (
    COLD_RACE,
    RACE_BUDGET,
    Budget,
    Option,
    chance_best,
    choose,
    gain,
)
from gateway.routing.cost import Shape, Weights, cost
from gateway.routing.lengths import Lengths, shape_of
from gateway.routing.priors import Prior, pooled
from tests.test_routing_belief_plan_same import branches

POLICY = BUILTIN_POLICIES["balanced"]
WEIGHTS = Weights.of(POLICY)


def _deployments(n: int) -> list[DeploymentConfig]:
    config = parse_config(
        {
            "providers": [{"name": f"p{i}", "base_url": f"http://127.0.0.1:9/p{i}"} for i in range(n)],
            "models": [
                {
                    "name": "m",
                    "deployments": [
                        {"provider": f"p{i}", "model": "x", "price_in": 0.5, "price_out": 0.5} for i in range(n)
                    ],
                }
            ],
        },
        source="test.toml",
    )
    return list(config.models[0].deployments)


def _measured(ttft: float, tps: float, n: int = 60, *, at: float = 100.0, sigma: float = 0.3) -> Belief:
    belief = Belief()
    rng = random.Random(f"{ttft}:{tps}")
    now = at - n * 0.25
    for _ in range(n):
        now += 0.25
        belief.observe(now, Prior(), ttft * math.exp(rng.gauss(0, sigma)), 1 / (tps * math.exp(rng.gauss(0, sigma))))
    return belief


def _options(beliefs: list[Belief]) -> list[Option]:
    deployments = _deployments(len(beliefs))
    return [Option(d, b, Prior()) for d, b in zip(deployments, beliefs, strict=True)]


def test_a_clear_leader_goes_first_and_exploration_stays_within_its_budget() -> None:
    options = _options([_measured(0.4, 200.0), _measured(1.5, 60.0), _measured(0.9, 120.0)])
    rng, budget = random.Random(1), Budget()
    firsts, extra = [], 0
    for _ in range(400):
        budget.credit("m", RACE_BUDGET)
        choice = choose(options, Shape(20, 256), WEIGHTS, 100.0, rng, may_race=True, budget=budget, model="m")
        firsts.append(choice.order[0])
        extra += bool(choice.race) or choice.shadow is not None
    assert firsts.count(0) >= 380
    assert extra <= 400 * RACE_BUDGET + Budget().burst


def test_near_equal_deployments_share_requests_instead_of_herding() -> None:
    options = _options([_measured(0.5, 180.0, n=8), _measured(0.5, 180.0, n=8)])
    rng = random.Random(2)
    firsts = [
        choose(options, Shape(20, 256), WEIGHTS, 100.0, rng, may_race=False).order[0] for _ in range(200)
    ]  # not a stream: the draw's order stands
    assert 50 < firsts.count(0) < 150


def test_a_cold_start_races_the_unmeasured_at_once() -> None:
    options = _options([Belief() for _ in range(COLD_RACE + 2)])
    choice = choose(options, Shape(20, 256), WEIGHTS, 0.0, random.Random(3), may_race=True, budget=Budget())
    assert choice.cold and len(choice.race) == COLD_RACE
    assert choice.order[:COLD_RACE] == choice.race
    # Once one is measured, an unmeasured one races beside it (the measured leader joins at once).
    options = _options([_measured(0.5, 150.0), Belief()])
    choice = choose(options, Shape(20, 256), WEIGHTS, 100.0, random.Random(4), may_race=True, budget=Budget())
    assert choice.cold and choice.race == (1, 0)


def _looks(beliefs: list[Belief], output_tokens: int, requests: int) -> tuple[int, int]:
    """Races and shadows over ``requests`` streamed requests, the budget credited each time; a shadow always rides
    beside the leader (option 0), which answers."""
    options = _options(beliefs)
    rng, budget = random.Random(5), Budget()
    races = shadows = 0
    for _ in range(requests):
        budget.credit("m", RACE_BUDGET)
        choice = choose(options, Shape(20, output_tokens), WEIGHTS, 100.0, rng, may_race=True, budget=budget, model="m")
        races += bool(choice.race)
        shadows += choice.shadow is not None
        if choice.shadow is not None:
            assert choice.order[0] == 0  # the leader answers; the shadow is measured beside it
    return races, shadows


def test_a_look_at_a_slower_streamer_is_a_shadow_at_a_faster_one_a_race() -> None:
    # The second starts sooner but streams slower: a race would hand it long answers on its first token.
    races, shadows = _looks([_measured(0.6, 250.0), _measured(0.3, 60.0, n=3)], 512, 2000)
    assert shadows > 0 and races == 0
    # The second streams faster (it starts later) and is thinly measured: racing it costs the request nothing.
    races, _ = _looks([_measured(0.3, 200.0), _measured(2.0, 800.0, n=3)], 512, 2000)
    assert races > 0


def test_a_look_at_a_near_equal_that_streams_a_little_slower_is_a_race() -> None:
    """Two deployments alike but for a slightly slower stream: a race hands the client the earlier of two first
    tokens, which saves more than the slower stream it sometimes hands over costs. A look there is a race (it
    helps the request it rides on), not a shadow (which only measures)."""
    races, shadows = _looks([_measured(0.45, 220.0, sigma=0.55), _measured(0.45, 200.0, sigma=0.55)], 256, 500)
    assert races > 0 and shadows == 0


def _gain(beliefs: list[Belief], index: int, now: float, draws: int = 20) -> float:
    """Option ``index``'s knowledge gradient against option 0 as the leader, its priors pooled from the others."""
    options = _options(beliefs)
    options = [Option(o.deployment, o.belief, pooled([p.belief for p in options if p is not o], now)) for o in options]
    shape = Shape(20, 256)
    leader = cost(options[0].belief.expected(now, options[0].prior), options[0].deployment, shape, WEIGHTS)
    rng = random.Random(11)
    return sum(gain(options[index], leader, shape, WEIGHTS, now, rng) for _ in range(draws)) / draws


def test_a_look_is_worth_more_the_longer_a_slower_deployment_went_unheard() -> None:
    """The knowledge gradient of a deployment known to be 3x slower: nothing just after it was heard, then growing
    with the chance that it changed since (the hazard), so a look finds a recovery in a time the hazard sets."""
    beliefs = [_measured(0.4, 200.0), _measured(1.5, 60.0)]
    fresh = _gain(beliefs, 1, 101.0)
    later = _gain(beliefs, 1, 100.0 + HAZARD_S / 2)
    stale = _gain(beliefs, 1, 100.0 + HAZARD_S)
    assert fresh < 0.005
    assert fresh < later < stale
    assert stale > 0.1


def test_a_look_goes_where_it_may_teach_most() -> None:
    """With the budget ready, the look goes to the deployment unheard for long (it may have changed), not to the one
    as slow but heard a moment ago."""
    leader, heard, unheard = _measured(0.4, 200.0, at=300.0), _measured(1.5, 60.0, at=300.0), _measured(1.5, 60.0)
    options = _options([leader, heard, unheard])
    options = [
        Option(o.deployment, o.belief, pooled([p.belief for p in options if p is not o], 300.0)) for o in options
    ]
    looked = []
    for seed in range(20):
        choice = choose(
            options, Shape(20, 256), WEIGHTS, 300.0, random.Random(seed), may_race=True, budget=Budget(), model="m"
        )
        assert choice.explored
        looked.append(choice.shadow if choice.shadow is not None else choice.race[0])
    assert looked.count(2) >= 18


def test_a_look_weighs_each_run_not_one_wide_normal() -> None:
    """A level held by a well-measured run and a young run from one wild answer: what one more answer would teach
    is which of the two holds, so an answer at the old level brings the belief back to it and one at the young
    run's level moves it there. Read as one wide normal (their moments), either answer would land in between."""
    belief = _measured(0.4, 200.0)
    belief.observe(100.1, Prior(), 2.0, 1 / 60.0)  # wild in both: a young run, not yet a change
    plain = branches(belief, 100.1, Prior())
    assert [c[3] for c in plain].count(False) == len(belief.runs) > 1
    assert abs(sum(c[0] for c in plain) - 1.0) < 1e-9
    young = max((c for c in plain if not c[3]), key=lambda c: c[1][0])
    assert 0.01 < young[0] < 0.9
    spread2 = [s * s for s in belief.spread()]
    hypotheses = look_terms(belief, 100.1, belief._new_runs(Prior()), spread2)[1]
    old_level = [math.log(0.4), math.log(1 / 200.0)]
    back = posterior_mean(hypotheses, *old_level)
    assert abs(math.log(back[0]) - old_level[0]) < 0.1
    there = posterior_mean(hypotheses, *young[1])
    assert abs(math.log(there[0]) - young[1][0]) < 0.1


def test_the_chance_of_being_best_follows_the_beliefs() -> None:
    options = _options([_measured(0.4, 200.0), _measured(1.5, 60.0)])
    chances = chance_best(options, Shape(20, 256), WEIGHTS, 100.0, random.Random(6))
    assert chances[0] > 0.9 and abs(sum(chances) - 1) < 1e-9


def test_an_agents_short_answers_favour_the_quick_starter_whatever_its_max_tokens() -> None:
    """max_tokens 32000 with answers of ~100 tokens: plan for the answers, not the ceiling."""
    quick, streamer = _measured(0.45, 70.0), _measured(2.4, 280.0)
    lengths = Lengths()
    key = shape_of("m", 32000)
    for tokens in (16, 60, 150, 60, 16, 400, 60, 150):
        lengths.heard(key, tokens, 32000)
    expected = lengths.forecast(key, 32000, POLICY.default_output_tokens).mean
    assert 80 < expected < 150
    options = _options([quick, streamer])
    planned = choose(options, Shape(20, expected), WEIGHTS, 100.0, random.Random(7), may_race=False)
    ceiling = choose(options, Shape(20, 32000), WEIGHTS, 100.0, random.Random(7), may_race=False)
    assert planned.order[0] == 0 and ceiling.order[0] == 1


def test_answer_lengths_are_predicted_per_shape_and_capped_by_max_tokens() -> None:
    lengths = Lengths()
    assert lengths.forecast(shape_of("m", None), None, 256).mean == 256  # nothing heard: the policy's default
    assert lengths.forecast(shape_of("m", 100), 100, 256).mean == 100  # never above the ceiling
    for _ in range(5):
        lengths.heard(shape_of("m", 8), 8, 8)
    assert lengths.forecast(shape_of("m", 8), 8, 256).mean == 8
    # A shape never answered borrows the share of max_tokens the model's answers used (all of it here).
    assert lengths.forecast(shape_of("m", 800), 800, 256).mean == 800
    for _ in range(5):
        lengths.heard(shape_of("m", 800), 800, 800)
    assert lengths.forecast(shape_of("m", 800), 800, 256).mean == 800


def _looks_at_300(beliefs: list[Belief]) -> list[int]:
    """Where the look of each of 40 streams goes at 300 s (race or shadow), each prior pooled from the others."""
    options = _options(beliefs)
    options = [
        Option(o.deployment, o.belief, pooled([p.belief for p in options if p is not o], 300.0)) for o in options
    ]
    looked = []
    for seed in range(40):
        choice = choose(
            options, Shape(20, 256), WEIGHTS, 300.0, random.Random(seed), may_race=True, budget=Budget(), model="m"
        )
        looked.append(choice.shadow if choice.shadow is not None else choice.race[0])
    return looked


def test_a_look_goes_where_traffic_will_not_tell() -> None:
    """``b`` is as near the leader as it is thinly told apart from it, but it serves requests and is heard every
    moment: what a look would teach of it, traffic tells a moment later anyway. ``c``, three times slower and
    unheard for ten seconds, is heard only when a look goes there, so a look is worth what it teaches times how
    much sooner than traffic would: the looks go to ``c``."""
    leader = _measured(0.4, 200.0, at=300.0, sigma=0.6, n=12)
    near = _measured(0.42, 195.0, at=300.0, sigma=0.6, n=12)
    looked = _looks_at_300([leader, near, _measured(1.2, 80.0, at=290.0)])
    assert looked.count(2) >= 36, looked


def test_a_look_goes_to_one_answered_once_after_a_silence() -> None:
    """``back`` led, failed a dozen times in a row, and then answered once just now: whether it is back is worth
    knowing, and nobody sends it requests while its failure chance reads near a half. Heard a moment ago, it is
    still not heard again until a look goes there (its last two answers lay forty seconds apart), so the looks go to
    it rather than to ``slow``, three times slower and unheard for ten seconds."""
    leader = _measured(0.5, 180.0, at=300.0, n=40)
    back = _measured(0.3, 240.0, at=262.0)
    for k in range(12):
        back.failed(264.0 + 2 * k, True)
    back.observe(299.5, Prior(), 0.3, 1 / 240.0)
    back.failed(299.5, False)
    looked = _looks_at_300([leader, back, _measured(1.2, 80.0, at=290.0)])
    assert looked.count(1) >= 36, looked


def test_one_left_alone_keeps_its_place_until_an_answer_moves_it() -> None:
    """``runner`` is the better of two fallbacks by every answer heard (0.45 s, 195 tokens/s against 0.6 s, 170),
    but the traffic went to ``other`` for the last thirty seconds. Nothing heard says ``runner`` got slower; what it
    may have become since (any of its siblings, whose middle is slow) is the looks' to find out, not a cost charged
    to it while it is left alone: the leader is still ``runner``."""
    runner = _measured(0.45, 195.0, at=70.0, n=20, sigma=0.2)
    other = _measured(0.6, 170.0, at=100.0, n=20, sigma=0.2)
    slow = [_measured(1.5, 60.0, at=100.0), _measured(1.1, 90.0, at=100.0), _measured(2.0, 45.0, at=100.0)]
    options = _options([runner, other, *slow])
    options = [
        Option(o.deployment, o.belief, pooled([p.belief for p in options if p is not o], 100.0)) for o in options
    ]
    choice = choose(options, Shape(20, 256), WEIGHTS, 100.0, random.Random(0), may_race=True)
    assert choice.order[:2] == (0, 1), choice.order


def test_a_change_lands_among_the_deployments_of_its_price_or_anywhere() -> None:
    """Six deployments where the dear are quick and the cheap slow; two unheard for thirty seconds: ``dear`` (slow
    for its price) and ``cheap`` (as slow as its price says). Never heard, a deployment is believed where its price
    puts it. A change lands as likely there as anywhere among the siblings (their centre, blind to price): pooled
    from the levels alone, it landed only at the centre, which at a tenth of the price wins by far under the
    balanced policy, and every look went to ``cheap``; now a change of ``dear`` may teach something too."""
    rows = [(0.9, 0.25, 250.0, 300.0), (0.7, 0.35, 210.0, 300.0), (0.45, 0.6, 150.0, 300.0), (0.3, 0.9, 100.0, 300.0)]
    rows += [(0.8, 0.8, 120.0, 270.0), (0.1, 1.6, 55.0, 270.0)]  # dear, cheap
    config = parse_config(
        {
            "providers": [{"name": f"p{i}", "base_url": f"http://127.0.0.1:9/p{i}"} for i in range(len(rows))],
            "models": [
                {
                    "name": "m",
                    "deployments": [
                        {"provider": f"p{i}", "model": "x", "price_in": row[0], "price_out": row[0]}
                        for i, row in enumerate(rows)
                    ],
                }
            ],
        },
        source="test.toml",
    )
    beliefs = [_measured(ttft, tps, at=at, n=40) for _, ttft, tps, at in rows]
    options = []
    for i, deployment in enumerate(config.models[0].deployments):
        others = [j for j in range(len(rows)) if j != i]
        prior = pooled([beliefs[j] for j in others], 300.0, rows[i][0], [rows[j][0] for j in others])
        options.append(Option(deployment, beliefs[i], prior))
    prior = options[5].prior
    line, centre = prior.mean[1], prior.centre[1]
    assert line is not None and centre is not None
    assert 1 / math.exp(line) < 100.0 < 1 / math.exp(centre)  # cheap: slow by its price, quick at the centre
    landing, spread = prior.landing(1)
    assert landing == pytest.approx((line + centre) / 2) and spread > (prior.var[1] + prior.centre_var[1]) / 2
    looked = []
    for seed in range(40):
        choice = choose(
            options, Shape(20, 256), WEIGHTS, 300.0, random.Random(seed), may_race=True, budget=Budget(), model="m"
        )
        looked.append(choice.shadow if choice.shadow is not None else choice.race[0])
    assert looked.count(4) >= 3, looked  # none with the levels pooled alone
