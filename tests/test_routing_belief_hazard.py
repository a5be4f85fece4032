"""The learned hazard (``gateway.routing.belief_hazard``): a Gamma posterior on how often a model's deployments change,
its evidence the change points its beliefs found against the time they watched."""

from __future__ import annotations

import math
import random

import pytest

from gateway.routing.belief import NO_PRIOR, Belief
from gateway.routing.belief_hazard import HAZARD_S, Hazard
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.belief_runs import TTFT
from gateway.routing.priors import MEMORY
from gateway.stats import InMemoryStatsStore
from tests.support.belief_streams import told
from tests.support.clock import FakeClock
from tests.support.config import gateway_config

_TAU = MEMORY * HAZARD_S


def _watched(seconds: float) -> float:
    """The watching ``seconds`` of it leave counted, faded (heard in one piece or many alike)."""
    return _TAU * (1.0 - math.exp(-seconds / _TAU))


def _answer(belief: Belief, rng: random.Random, now: float, ttft: float, tps: float = 100.0) -> None:
    belief.observe(now, NO_PRIOR, ttft * math.exp(rng.gauss(0, 0.3)), 1 / (tps * math.exp(rng.gauss(0, 0.3))))


def test_the_prior_is_hazard_s_and_the_posterior_mean_counts_changes_over_time_watched() -> None:
    hazard = Hazard()
    assert hazard.every_s == HAZARD_S
    hazard.heard(30.0, 0.5)
    hazard.heard(50.0, 1.0)
    hazard.heard(0.0, -0.25)  # heard again at once: a change suspected on the answer before is unsaid
    hazard.heard(5.0, math.nan)
    hazard.heard(-1.0, 1.0)
    # Each interval fades the evidence before it by e^(-w/τ) and adds τ(1 - e^(-w/τ)) of watching.
    changes = 1.0 + 0.5 * math.exp(-50.0 / _TAU) + 1.0 - 0.25
    assert hazard.changes == pytest.approx(changes, rel=1e-12)
    assert hazard.watched_s == pytest.approx(HAZARD_S + _watched(80.0), rel=1e-12)
    assert hazard.every_s == pytest.approx((HAZARD_S + _watched(80.0)) / changes, rel=1e-12)


def test_deployments_where_nothing_changes_make_changes_rarer() -> None:
    """Three deployments of one model answering steadily for five minutes: their change points found next to nothing
    in fifteen minutes of watching, so a change is expected far less often than the prior's ``HAZARD_S``."""
    rng, hazard = random.Random(3), Hazard()
    beliefs = [Belief(hazard=hazard) for _ in range(3)]
    for step in range(300):
        for belief, ttft in zip(beliefs, (0.3, 0.6, 1.2), strict=True):
            _answer(belief, rng, step + 1.0, ttft)
    assert hazard.watched_s == pytest.approx(HAZARD_S + _watched(3 * 299.0), rel=1e-9)
    assert hazard.every_s > 4 * HAZARD_S


def test_the_evidence_fades_so_a_burst_after_a_long_quiet_is_heard_within_the_memory() -> None:
    """A model watched for a day with nothing changing, then changing once a minute: the quiet day is remembered as
    at most ``MEMORY × HAZARD_S`` seconds of watching (a change expected at most about every that much, not every
    day), and an hour of the burst brings the hazard to a change every two minutes or sooner. Counted forever, the
    day would hold it at a change every twenty-five minutes after that hour, and at one a day before it."""
    hazard = Hazard()
    for _ in range(24 * 60):
        hazard.heard(60.0, 0.0)
    quiet = (HAZARD_S + _TAU) / (1.0)
    assert hazard.every_s == pytest.approx(quiet, rel=1e-6)
    assert hazard.every_s < 2 * MEMORY * HAZARD_S
    for _ in range(60):
        hazard.heard(60.0, 1.0)
    assert hazard.every_s < 2 * HAZARD_S
    pieces = Hazard()  # the same watching in pieces of any size counts alike
    for w in (3.0, 40.0, 0.5, 1000.0, 17.0):
        pieces.heard(w, 0.0)
    whole = Hazard()
    whole.heard(1060.5, 0.0)
    assert pieces.watched_s == pytest.approx(whole.watched_s, rel=1e-12)


def test_deployments_that_keep_jumping_make_changes_likelier() -> None:
    """One deployment whose first token jumps fourfold every 20 s: each jump is found (most of an answer's weight on
    "a change happened here"), so a change is expected more often than once every ``HAZARD_S``."""
    rng, belief = random.Random(5), Belief()
    for step in range(300):
        _answer(belief, rng, step + 1.0, 0.25 if (step // 20) % 2 else 1.0)
    assert belief.hazard.every_s < HAZARD_S / 2
    assert belief.hazard.changes > 10.0  # most of the 14 jumps found (the weight on "a change here" alone: 2.3)
    assert belief.hazard.changes < 25.0  # not one per answer


def test_the_learned_hazard_is_what_the_belief_reads() -> None:
    """An unheard belief's chance of a change and its predictive spread read the model's learned hazard: a model
    whose deployments never change keeps a belief heard a minute ago surer than the prior's hazard would."""
    rng, steady = random.Random(7), Belief()
    for step in range(200):
        _answer(steady, rng, step + 1.0, 0.5)
    later = 200.0 + 60.0
    assert steady.changed(later) == pytest.approx(1 - math.exp(-60.0 / steady.hazard.every_s), rel=1e-12)
    assert steady.changed(later) < 1 - math.exp(-60.0 / HAZARD_S)
    fresh = Belief(steady.runs, steady.heard_at, steady.noise, steady.scatters, steady.spread2, steady.answers)
    fresh.mixture = steady.mixture
    prior = NO_PRIOR.__class__(mean=(math.log(2.0), math.log(1 / 50.0)), var=(0.5, 0.5))
    assert steady.expected(later, prior).spread[TTFT] < fresh.expected(later, prior).spread[TTFT]


def test_a_plans_copy_teaches_the_hazard_nothing() -> None:
    """What a plan tells a copy (an attempt overdue, streams begun) is not evidence for good: the shared hazard is
    as the answers left it."""
    rng, belief = random.Random(9), Belief()
    for step in range(20):
        _answer(belief, rng, step + 1.0, 0.5)
    before = (belief.hazard.changes, belief.hazard.watched_s)
    told(belief, 40.0, NO_PRIOR, [(4.0, 0.1)], ttft_at_least=5.0)
    assert (belief.hazard.changes, belief.hazard.watched_s) == before


def test_a_models_deployments_share_one_hazard_and_models_do_not() -> None:
    config = gateway_config(["a", "b"])
    router = BeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=FakeClock())
    assert router.belief("m", "a").hazard is router.belief("m", "b").hazard
    assert router.belief("other", "a").hazard is not router.belief("m", "a").hazard
