"""The belief router (``gateway.routing.belief_router``) in simulated time: where its looks go, and how soon.

Runs the real router over ``benchmarks.routing_simulate`` (no processes): a market where the slowest of three
recovers while requests come once a second, the case where looks budgeted as a share of requests came tens of
seconds late.
"""

from __future__ import annotations

import random

import pytest

from benchmarks.routing_scenarios import STRESS
from benchmarks.routing_simulate import Simulation
from gateway.routing.belief_rank import rank_beliefs
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate
from gateway.stats import InMemoryStatsStore
from tests.support.belief_streams import ByteMeter, begin_stream, hear_ten_answers, told
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.samples import make_sample


def _served_after(seed: int, name: str, at_s: float) -> tuple[float, float]:
    """When the recovered provider is first looked at after ``at_s``, and when it first answers as the leader."""
    scenario = next(s for s in STRESS if s.name == "recovery-1rps")
    sim = Simulation(scenario, seed, "gateway", None)
    router = sim.router
    assert isinstance(router, BeliefRouter)
    started: list[tuple[float, str]] = []
    attempt_started = router.attempt_started

    def record(candidate: Candidate, *, retry: bool = False) -> bool:
        ok = attempt_started(candidate, retry=retry)
        if ok and candidate.name == name and sim.now >= at_s:
            started.append((sim.now - at_s, candidate.reason))
        return ok

    router.attempt_started = record  # type: ignore[method-assign]
    sim.run()
    look = min(t for t, _ in started)
    led = min(t for t, reason in started if reason == "best-score")
    return look, led


def test_a_recovery_at_one_request_a_second_is_found_in_the_time_its_belief_sets() -> None:
    """novita, unheard since the cold start, recovers 50 s in: its belief's chance of a change has grown with the
    time it went unheard, so a look goes there within seconds, not when a share of requests comes round."""
    change = next(s for s in STRESS if s.name == "recovery-1rps").changes[0]
    for seed in range(1, 5):
        look, led = _served_after(seed, change.name, change.at_s)
        assert look < 20.0, (seed, look)
        assert led < 25.0, (seed, led)


def _first_tokens(router: BeliefRouter) -> dict[str, float]:
    """Each deployment's predicted first token as the plan sees it now (its belief, told of attempts running)."""
    rows = rank_beliefs(router, router.config.models[0]).rows
    return {row.scored.deployment.name: row.scored.prediction.ttft_s or 0.0 for row in rows}


def test_an_attempt_overdue_at_a_deployment_never_heard_counts_against_it() -> None:
    """``a`` and ``b`` answer in about 0.3 s; ``c``, never heard, has kept a request waiting 3 s without a first
    token. That is evidence like a lost race ("its first token is at least this long"), read against the prior it
    borrows from the others: the plan sees ``c`` slow to start, not the others' 0.3 s it would borrow otherwise."""
    config = gateway_config(["a", "b", "c"], policy={"extends": "balanced"})
    clock = FakeClock()
    router = BeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = config.models[0]
    a, b, c = (Candidate(d, config.provider(d.provider), model=model.name) for d in model.deployments)
    rank_beliefs(router, model)  # as a first plan does: a belief for each, its prior pooled from each answer on
    for _ in range(10):
        for candidate in (a, b):
            clock.advance(0.5)
            assert router.attempt_started(candidate)
            router.attempt_finished(candidate, make_sample(deployment=candidate.name, ttft_s=0.3, tokens_per_s=200.0))
    fresh = _first_tokens(router)
    assert fresh["c"] < 0.6  # the others' level, borrowed
    assert router.attempt_started(c)
    clock.advance(3.0)
    waited = _first_tokens(router)
    assert waited["c"] > 0.9  # three times the level it borrows
    assert waited["a"] < 0.6
    assert router.beliefs[(model.name, "c")].answers == 0  # for the plan only: nothing was heard from it


def test_a_stream_running_slow_is_read_once_as_its_pace_not_again_as_a_bound() -> None:
    """``a`` answers at 200 tokens/s; a stream begun there since it was last heard runs at 40. The plan reads that
    stream as one answer, its first token and its pace so far, as the belief would read it. Also taken as the bound
    "at least this slow", the same stream would count twice, and one slow answer would read as a likely change."""
    config = gateway_config(["a", "b"], policy={"extends": "balanced"})
    clock = FakeClock()
    router = BeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = config.models[0]
    a, b = (Candidate(d, config.provider(d.provider), model=model.name) for d in model.deployments)
    rank_beliefs(router, model)
    hear_ten_answers(router, clock, (a, b))
    meter = begin_stream(router, clock, a)
    clock.advance(2.0)
    meter.received_bytes = 4 * 81  # 80 tokens after the first in 2 s: 40 tokens/s
    belief, prior = router.beliefs[(model.name, "a")], router.priors[(model.name, "a")]
    once = told(belief, clock(), prior, [(0.3, 2.0 / 80)]).expected(clock()).s_per_token
    seen = router._option(model.name, "a", a.deployment, router.stats.snapshot(), clock()).belief
    assert seen.expected(clock()).s_per_token == pytest.approx(once, rel=1e-9)


def _answered_then_failing(answers: int) -> tuple[BeliefRouter, FakeClock, Candidate]:
    """``a`` (beside ``b``) answers ``answers`` times, then starts failing: the router and ``a``'s candidate."""
    config = gateway_config(["a", "b"], policy={"extends": "balanced"})
    clock = FakeClock()
    router = BeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = config.models[0]
    a = Candidate(model.deployments[0], config.provider(model.deployments[0].provider), model=model.name)
    rank_beliefs(router, model)
    for _ in range(answers):
        clock.advance(0.2)
        assert router.attempt_started(a)
        router.attempt_finished(a, make_sample(deployment="a", ttft_s=0.3, tokens_per_s=200.0))
    return router, clock, a


def _fail(router: BeliefRouter, clock: FakeClock, a: Candidate) -> None:
    clock.advance(0.2)
    assert router.attempt_started(a)
    router.attempt_finished(a, make_sample(deployment="a", outcome="upstream_error", ttft_s=None, tokens_per_s=None))


def test_a_deployment_that_goes_down_after_many_answers_opens_its_circuit_at_the_threshold() -> None:
    """Forty answers, then every attempt fails. The circuit opens on ``failure_threshold`` (5) failures in a row
    while most attempts fail now; its own reading of "most" (more than half of its last twenty) would wait for
    eleven, and once the belief turns requests away they may never come. The belief says whether most fail now."""
    router, clock, a = _answered_then_failing(40)
    key = ("m", "a")
    for _ in range(4):
        _fail(router, clock, a)
        assert router.state.health.state(key, clock(), router._circuit_changed) == "closed"
    _fail(router, clock, a)
    assert router.state.health.state(key, clock(), router._circuit_changed) == "open"


def test_a_circuit_that_goes_half_open_reads_the_failure_chance_from_the_prior() -> None:
    """While its circuit is open a deployment gets no attempt, so its failure chance keeps the outage's failures; the
    circuit's cool-down is when a recovery is worth trying. Half-open, the failure chance is the prior's again, so
    the plan sends the probe the circuit admits rather than leaving it behind the others."""
    router, clock, a = _answered_then_failing(40)
    key = ("m", "a")
    for _ in range(5):
        _fail(router, clock, a)
    belief = router.beliefs[key]
    assert belief.expected(clock()).failure > 0.6
    clock.advance(router.config.policy_for(router.config.models[0]).cooldown_s)
    assert router.state.health.state(key, clock(), router._circuit_changed) == "half_open"
    assert belief.expected(clock()).failure == pytest.approx(0.1, abs=0.01)


def test_a_half_open_circuit_closes_when_its_probe_begins_to_answer() -> None:
    """The probe of a half-open circuit sent its first token: the provider is back. The circuit closes then, not
    when a long answer ends, so the next requests may go there while the probe still streams."""
    router, clock, a = _answered_then_failing(40)
    key = ("m", "a")
    for _ in range(5):
        _fail(router, clock, a)
    clock.advance(router.config.policy_for(router.config.models[0]).cooldown_s)
    assert router.attempt_started(a)
    assert not router.attempt_started(a)  # half-open: one probe at a time
    clock.advance(0.3)
    router.attempt_streaming(a, ByteMeter())
    assert router.state.health.state(key, clock(), router._circuit_changed) == "closed"
    assert router.attempt_started(a)
