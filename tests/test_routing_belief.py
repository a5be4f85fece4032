"""The belief (``gateway.routing.belief``) on its own: answers in, a posterior out, no router around it."""

from __future__ import annotations

import math
import random

import pytest

from gateway.routing.belief import Belief
from gateway.routing.belief_hazard import HAZARD_S
from gateway.routing.priors import BETWEEN, Prior, pooled
from tests.support.belief_streams import told

NO_PRIOR = Prior()


def _feed(
    belief: Belief,
    rng: random.Random,
    n: int,
    *,
    start: float,
    ttft: float,
    tps: float,
    sigma: float = 0.3,
    every: float = 0.25,
) -> float:
    """``n`` log-normal answers, one every ``every`` seconds from ``start``; returns the time of the last."""
    now = start
    for _ in range(n):
        now += every
        belief.observe(now, NO_PRIOR, ttft * math.exp(rng.gauss(0, sigma)), 1 / (tps * math.exp(rng.gauss(0, sigma))))
    return now


def test_a_steady_deployment_is_learned_with_its_spread() -> None:
    belief = Belief()
    now = _feed(belief, random.Random(1), 200, start=0.0, ttft=0.5, tps=200.0, sigma=0.3)
    expected = belief.expected(now)
    assert abs(expected.ttft_s / 0.5 - 1) < 0.1
    assert abs(expected.s_per_token * 200.0 - 1) < 0.1
    s_ttft, s_spt = belief.spread()
    assert 0.2 < s_ttft < 0.45 and 0.2 < s_spt < 0.45


def test_a_jump_is_followed_within_a_few_answers() -> None:
    belief = Belief()
    rng = random.Random(2)
    now = _feed(belief, rng, 80, start=0.0, ttft=0.4, tps=200.0)
    # Four times slower, both first token and speed: a few answers move the level there.
    now = _feed(belief, rng, 4, start=now + 5.0, ttft=1.6, tps=50.0)
    expected = belief.expected(now)
    assert expected.ttft_s > 1.0
    assert expected.s_per_token * 200.0 > 2.5


def test_a_first_answer_far_from_a_rough_prior_says_where_the_level_is_not_how_far_answers_scatter() -> None:
    """Nothing measured anywhere: the level starts at 50 tokens/s, a factor e either way. An answer at 400 tokens/s
    moves the level there; counted as a residual of the spread, it would read answers as scattering by a factor 3."""
    belief = Belief()
    belief.observe(1.0, NO_PRIOR, 0.8, 1 / 400.0)
    assert belief.expected(1.0).s_per_token * 400.0 < 2.0
    assert belief.spread()[1] < 0.7  # read as a full residual, 1.1
    rng = random.Random(12)
    _feed(belief, rng, 60, start=1.0, ttft=0.8, tps=400.0, sigma=0.8)
    assert 0.6 < belief.spread()[1] < 1.0  # a wide spread is still learned from answers that scatter widely


def test_a_change_starts_a_new_run_from_the_prior_not_from_the_level_it_left() -> None:
    """Bayesian online change-point detection: after a change the level is a fresh draw from the prior (the model's
    other deployments), or back where it was before its last change; never anchored where it is now. A slow
    deployment that recovers lands among its siblings, so a look at it is worth what that change would bring."""
    belief = Belief()
    _feed(belief, random.Random(3), 40, start=0.0, ttft=1.2, tps=70.0)
    prior = Prior((math.log(0.3), math.log(1 / 300.0)), (0.25, 0.25))
    landing = belief._new_runs(prior)
    assert [(run.mean0, run.mean1) for run in landing] == [(math.log(0.3), math.log(1 / 300.0))]
    assert landing[0].weight == 1.0
    # Once it changed, where it was before is the other place a change may land (a dip's end, a swap back).
    now = _feed(belief, random.Random(4), 30, start=20.0, ttft=0.3, tps=300.0)
    assert belief.before is not None and math.exp(belief.before[0]) > 0.9
    assert sorted(math.exp(run.mean0) for run in belief._new_runs(prior)) == [
        pytest.approx(0.3),
        pytest.approx(math.exp(belief.before[0])),
    ]
    assert belief.expected(now).ttft_s < 0.45


def test_one_wild_answer_neither_triggers_a_change_nor_drags_the_level() -> None:
    belief = Belief()
    rng = random.Random(3)
    now = _feed(belief, rng, 80, start=0.0, ttft=0.4, tps=200.0)
    before = belief.expected(now).ttft_s
    belief.observe(now + 0.25, NO_PRIOR, 6.0, 1 / 200.0)  # fifteen times the median, once
    after = belief.expected(now + 0.25).ttft_s
    assert after / before < 1.2
    now = _feed(belief, rng, 3, start=now + 0.25, ttft=0.4, tps=200.0)
    assert belief.expected(now).ttft_s / before < 1.1


def test_uncertainty_grows_while_nothing_is_heard() -> None:
    belief = Belief()
    now = _feed(belief, random.Random(4), 50, start=0.0, ttft=0.4, tps=200.0)
    _, fresh = belief.level(now, 0)
    _, stale = belief.level(now + 300.0, 0)
    assert stale > fresh
    assert belief.changed(now) < 0.01
    assert abs(belief.changed(now + belief.hazard.every_s) - (1 - math.exp(-1))) < 1e-9


def test_a_stale_belief_is_sometimes_drawn_from_the_prior() -> None:
    belief = Belief()
    now = _feed(belief, random.Random(5), 50, start=0.0, ttft=2.0, tps=50.0)
    prior = Prior((math.log(0.3), math.log(1 / 300)), (0.01, 0.01))  # the model's others: much faster
    rng = random.Random(6)
    fresh = [belief.draw(now + 1.0, rng, prior) for _ in range(400)]
    stale = [belief.draw(now + 2 * HAZARD_S, rng, prior) for _ in range(400)]
    assert sum(d.changed for d in fresh) < 20
    assert 200 < sum(d.changed for d in stale) < 400
    assert min(d.ttft_s for d in stale) < 0.6  # a look at whether it caught up is plausible
    assert sum(belief.predicted(now + 2 * HAZARD_S, prior)[2:]) > sum(belief.predicted(now + 1.0, prior)[2:])


def test_a_lower_bound_above_the_level_raises_it_one_far_below_does_not() -> None:
    belief = Belief()
    now = _feed(belief, random.Random(7), 40, start=0.0, ttft=0.5, tps=200.0)
    level = belief.expected(now).ttft_s
    high = belief.bounded(now + 0.1, NO_PRIOR, 3.0)
    low = belief.bounded(now + 0.1, NO_PRIOR, 0.05)
    assert high.expected(now + 0.1).ttft_s > 1.05 * level  # as one slow answer would, no more (a t tail)
    assert abs(low.expected(now + 0.1).ttft_s / level - 1) < 0.05
    assert belief.expected(now + 0.1).ttft_s == level  # ``bounded`` is a copy: the belief itself is untouched


def test_a_belief_never_heard_keeps_what_its_running_attempts_say() -> None:
    """Never heard, a deployment is its prior. A stream running there now (its first token, its pace so far) or an
    attempt overdue is what there is of it, for the plan: read as "changed since last heard" it would be the
    prior again and the evidence lost."""
    prior = Prior((math.log(0.3), math.log(1 / 200.0)), (0.5, 0.5))
    belief = Belief()
    assert abs(belief.expected(10.0, prior).ttft_s / 0.3 - 1) < 1e-9
    streaming = told(belief, 10.0, prior, [(1.5, 1 / 50.0)])
    seen = streaming.expected(10.0, prior)
    assert seen.ttft_s > 0.7 and seen.s_per_token * 200.0 > 2.0  # most of the way (in logs) to 1.5 s, 50 tokens/s
    overdue = belief.bounded(10.0, prior, 3.0)
    assert overdue.expected(10.0, prior).ttft_s > 0.5
    assert belief.answers == 0 and belief.heard_at is None  # a copy, for one plan


def test_the_spread_is_learned_from_the_answers_hedges_cut_short_too() -> None:
    """First tokens scatter by a factor e^0.5; every one slower than 1.6x the median is cut short (a hedge won, a
    race was lost) and heard only as "at least 1.6x". Read from the answers alone, the spread would be the
    truncated one (about 0.35), and the deployment's mean first token too short; the bounds give the tail back."""
    belief = Belief()
    rng = random.Random(21)
    now, median, cut = 0.0, 0.5, 0.5 * 1.6
    for _ in range(300):
        now += 0.25
        ttft = median * math.exp(rng.gauss(0, 0.5))
        if ttft > cut:
            belief.observe(now, NO_PRIOR, at_least=(cut, None))
        else:
            belief.observe(now, NO_PRIOR, ttft, 1 / 200.0)
    assert 0.42 < belief.spread()[0] < 0.6
    assert abs(math.log(belief.expected(now).ttft_s / median)) < 0.15


def test_lost_races_in_a_row_move_the_level_past_them() -> None:
    belief = Belief()
    now = _feed(belief, random.Random(8), 40, start=0.0, ttft=0.5, tps=200.0)
    for i in range(6):
        belief.observe(now + i, NO_PRIOR, at_least=(2.0, None))
    assert belief.expected(now + 6).ttft_s > 1.5


def test_the_pooled_prior_is_the_others_levels_widened_by_their_spread() -> None:
    rng = random.Random(9)
    others = []
    for ttft in (0.4, 0.8):
        belief = Belief()
        _feed(belief, rng, 60, start=0.0, ttft=ttft, tps=100.0)
        others.append(belief)
    prior = pooled(others, 15.0)
    assert prior.mean[0] is not None and abs(math.exp(prior.mean[0]) / math.sqrt(0.4 * 0.8) - 1) < 0.15
    assert prior.var[0] > 0.1
    nothing = pooled([Belief()], 0.0)
    assert nothing.mean == (None, None) and nothing.var == (BETWEEN**2, BETWEEN**2)
    newcomer = Belief()
    assert abs(newcomer.expected(0.0).ttft_s - 1.0) < 1e-9  # nothing at all: the default level
    newcomer.observe(16.0, prior, 0.6, 0.01)
    assert 0.45 < newcomer.expected(16.0).ttft_s < 0.7


def test_prefill_is_learned_as_seconds_per_uncached_token() -> None:
    belief = Belief()
    rng = random.Random(10)
    now = _feed(belief, rng, 30, start=0.0, ttft=0.3, tps=100.0, sigma=0.1)
    for _ in range(30):
        now += 0.5
        belief.observe(now, NO_PRIOR, 0.3 + 8000 * 1e-4, 0.01, uncached_tokens=8000)
    slope = belief.prefill_s()
    assert 0.6e-4 < slope < 1.4e-4
    assert belief.expected(now).ttft_s < 0.45  # the level is the base latency, not the long prompts' first token


def test_a_run_of_failures_is_believed_and_so_is_the_recovery_after_it() -> None:
    """Failures have change points as levels do: a hundred answers then ten failures in a row read as a provider
    that now fails, not as 9% of its attempts; and a few answers after the failures stopped read as a recovery,
    not as three successes against ten failures."""
    belief = Belief()
    for i in range(100):
        belief.failed(i * 0.25, False)
    for i in range(10):
        belief.failed(25.0 + i * 0.25, True, 0.01)
    assert belief.expected(27.5).failure > 0.5
    for i in range(3):
        belief.failed(40.0 + i * 0.25, False)
    assert belief.expected(40.5).failure < 0.25
    # Unheard, a failing deployment drifts back toward the prior with the hazard: worth a look again in time.
    failing = Belief()
    for i in range(20):
        failing.failed(i * 0.25, True, 0.01)
    assert failing.expected(5.0).failure > 0.8
    assert failing.expected(5.0 + HAZARD_S).failure < failing.expected(5.0).failure - 0.2


def test_a_circuit_that_closes_again_restarts_the_failure_chance_from_the_prior() -> None:
    """An outage of a few hundred milliseconds is two changes far quicker than the hazard expects: the failure chance
    believes the failures, and the circuit breaker, having seen the deployment fail and then answer its probe, says
    the recovery. From then the failure chance is the prior's, not the outage's."""
    belief = Belief()
    for i in range(12):
        belief.failed(i * 0.01, False)
    for i in range(12):
        belief.failed(0.12 + i * 0.01, True, 0.005)
    assert belief.expected(0.3).failure > 0.6
    belief.failures.recovered(0.5)
    assert abs(belief.expected(0.5).failure - 0.1) < 0.01


def test_the_failure_chance_read_twice_at_one_time_is_read_once_and_forgotten_on_news() -> None:
    """A plan reads each deployment's failure chance several times at one time: the second read is the first's, and
    an attempt heard (or a circuit's close) at that same time is read afresh."""
    belief = Belief()
    for i in range(5):
        belief.failed(float(i), i == 4, 0.01)
    first = belief.failure(10.0)
    assert belief.failure(10.0) == first == belief.failures.counts(10.0, HAZARD_S)
    belief.failed(10.0, True, 0.01)
    assert belief.failure(10.0)[0] / sum(belief.failure(10.0)) > first[0] / sum(first)
    belief.failures.recovered(10.0)
    assert belief.failure(10.0) == pytest.approx((0.2, 1.8))


def test_failures_raise_the_failure_chance_and_fade() -> None:
    belief = Belief()
    for i in range(10):
        belief.failed(float(i), i % 2 == 0, 0.01)
    assert 0.35 < belief.expected(10.0).failure < 0.65
    assert belief.failures.failure_s < 0.05
    belief.failed(10.0 + 5 * HAZARD_S, False)
    assert belief.expected(10.0 + 5 * HAZARD_S).failure < 0.15


def test_a_deployment_heard_a_few_times_scatters_as_its_siblings_do() -> None:
    """The answers' spread is pooled as the level is: siblings measured well answer within a factor ~1.2 of their
    levels, so a deployment heard twice is read as sharply. Its expected time is not inflated by a spread nobody
    measured, and one look's answer after it changed (5x quicker and faster) is taken as the change it is: with the
    fixed prior spread (0.4) the same answer leaves the speed at ~200 tokens/s, a second look needed to lead."""
    rng = random.Random(21)
    siblings = []
    for ttft, tps in ((0.25, 250.0), (0.35, 210.0), (0.4, 190.0), (1.2, 80.0)):
        sibling = Belief()
        _feed(sibling, rng, 80, start=0.0, ttft=ttft, tps=tps, sigma=0.15)
        siblings.append(sibling)
    now = 20.0
    prior = pooled(siblings, now)
    assert math.sqrt(prior.spread2[0]) < 0.3 and math.sqrt(prior.spread2[1]) < 0.3  # 0.4 shrunk toward 0.17
    thin = Belief()
    for at, ttft, tps in ((now, 1.0, 100.0), (now + 10.0, 1.1, 95.0)):
        thin.observe(at, prior, ttft, 1 / tps)
    assert max(thin.spread()) < 0.3
    thin.observe(now + 40.0, prior, 0.2, 1 / 400.0)  # changed: one look's answer
    expected = thin.expected(now + 40.0, prior)
    assert 1 / expected.s_per_token > 300.0 and expected.ttft_s < 0.3


def test_a_first_answer_far_from_its_only_sibling_is_its_level_not_one_wild_answer() -> None:
    # The sibling answers in 5 ms; this one's first answer takes 1 s (200 times slower, about 4.6 of the pooled
    # prior's sd away). Read against a normal prior only, the Student-t took it for one wild answer of a level near
    # the sibling and the level moved two thirds of the way (0.16 s); beside the pooled prior, a level unlike the
    # siblings' (``first_runs``) takes it for what it is.
    sibling = Belief()
    for t in range(5):
        sibling.observe(float(t), Prior(), 0.005, 0.001)
    prior = pooled([sibling], 5.0)
    far = Belief()
    far.observe(6.0, prior, 1.0, 0.001)
    assert math.exp(far.level(6.0, 0)[0]) > 0.5
    assert math.exp(max(far.runs, key=lambda r: r.weight).mean0) > 0.8
    # An answer near the siblings is read as before: its level there, as sure as the prior and one answer make it.
    near = Belief()
    near.observe(6.0, prior, 0.006, 0.001)
    mean, var = near.level(6.0, 0)
    assert math.exp(mean) == pytest.approx(0.006, rel=0.05) and math.sqrt(var) < 0.32
