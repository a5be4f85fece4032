"""The belief router's running attempts told as they change (``gateway.routing.belief_running``), not at every plan."""

from __future__ import annotations

import dataclasses
import inspect
import math
import random
from typing import cast

import pytest

from gateway.routing.belief import NO_PRIOR, Belief
from gateway.routing.belief_attempts import RunningAttempt, bytes_per_token, pace_so_far, slowness_of
from gateway.routing.belief_hazard import Hazard
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.belief_running import RunningViews
from gateway.routing.plan import Candidate
from gateway.routing.priors import Prior
from gateway.stats import InMemoryStatsStore
from tests.support.belief_streams import ByteMeter, begin_stream, hear_ten_answers
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.samples import make_sample


def _heard() -> tuple[BeliefRouter, FakeClock, Candidate]:
    """``a`` and ``b`` heard ten times each (0.3 s to first token, 200 tokens/s, 4 bytes a token)."""
    config = gateway_config(["a", "b"], policy={"extends": "balanced"})
    clock = FakeClock()
    router = BeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = config.models[0]
    a, b = (Candidate(d, config.provider(d.provider), model=model.name) for d in model.deployments)
    hear_ten_answers(router, clock, (a, b))
    return router, clock, a


def _seen(router: BeliefRouter, clock: FakeClock, a: Candidate) -> Belief:
    """``a``'s belief as a plan reads it now."""
    return router._option(a.model, a.name, a.deployment, router.stats.snapshot(), clock()).belief


def test_a_stream_is_told_once_and_the_plans_between_its_events_read_the_same_view() -> None:
    """A stream begun since ``a`` was last heard tells its first token and its pace once, at the first plan that
    reads them; later plans, while nothing at ``a`` starts, streams or ends, read that same view (its pace is not
    told again as it goes on). An attempt started there reads the bounds again: one waiting 3 s for its first token
    is overdue, and the plan's first token of ``a`` grows."""
    router, clock, a = _heard()
    heard = router.beliefs[(a.model, a.name)]
    meter = begin_stream(router, clock, a)
    clock.advance(2.0)
    meter.received_bytes = 4 * 81  # 80 tokens after the first in 2 s: 40 tokens/s
    first = _seen(router, clock, a)
    clock.advance(1.0)
    meter.received_bytes = 4 * 101
    assert _seen(router, clock, a) is first
    told = router.running.kept[(a.model, a.name)].told
    assert told is not None and told.answers == heard.answers + 1  # one pair, told once
    assert router.attempt_started(a)  # waits for its first token from here
    clock.advance(3.0)
    again = _seen(router, clock, a)
    assert again is not first
    assert again.expected(clock()).ttft_s > 1.5 * first.expected(clock()).ttft_s
    assert told.answers == heard.answers + 1
    assert heard.answers == 10  # the plans told a copy: nothing was heard from the running attempts


def test_a_first_token_is_told_when_it_comes_and_the_pace_once_it_can_be_read() -> None:
    """A stream with its first token but too few tokens for a pace tells its first token; once ``PACE_TOKENS`` are
    in, a later plan tells its pace alone (its first token was told), and no plan tells either again. When ``a``
    hears an answer, no stream running is "since" any more: the told copy starts afresh."""
    router, clock, a = _heard()
    heard = router.beliefs[(a.model, a.name)]
    meter = begin_stream(router, clock, a)
    meter.received_bytes = 4 * 3
    _seen(router, clock, a)
    running = router.running.kept[(a.model, a.name)]
    assert running.told is not None and running.told.answers == heard.answers + 1
    clock.advance(1.0)
    meter.received_bytes = 4 * 41
    _seen(router, clock, a)
    _seen(router, clock, a)
    assert running.told.answers == heard.answers + 2
    b = Candidate(a.deployment, a.provider, model=a.model)
    assert router.attempt_started(b)
    router.attempt_finished(b, make_sample(deployment=a.name, ttft_s=0.3, tokens_per_s=200.0, output_tokens=100))
    _seen(router, clock, a)
    assert router.running.kept[(a.model, a.name)].told is None


def test_an_answer_pools_again_only_the_others_priors_from_the_one_belief_that_moved() -> None:
    """An answer at ``a`` moves ``a``'s belief only: ``b``'s prior (pooled from ``a``) is pooled again, ``a``'s own
    (pooled from ``b``, which did not move) is kept, and of the beliefs the pool reads only ``a``'s is read
    again. A failure moves no level: no prior is pooled again."""
    router, clock, a = _heard()
    keys = [(a.model, "a"), (a.model, "b")]
    priors = {k: router.priors[k] for k in keys}
    pooled, pool = router._pools[a.model]
    read = {k: pool.answers[pooled.index(k)] for k in keys}
    clock.advance(0.5)
    assert router.attempt_started(a)
    router.attempt_finished(a, make_sample(deployment="a", ttft_s=0.4, tokens_per_s=150.0, output_tokens=100))
    assert router.priors[keys[0]] is priors[keys[0]]
    assert router.priors[keys[1]] is not priors[keys[1]]
    assert pool.answers[pooled.index(keys[0])] != read[keys[0]]
    assert pool.answers[pooled.index(keys[1])] == read[keys[1]]
    priors = {k: router.priors[k] for k in keys}
    clock.advance(0.5)
    assert router.attempt_started(a)
    router.attempt_finished(a, make_sample(deployment="a", outcome="upstream_error", ttft_s=None))
    assert all(router.priors[k] is priors[k] for k in keys)


def test_a_running_attempts_written_init_takes_and_sets_what_the_generated_one_would() -> None:
    """``RunningAttempt.__init__`` is written out (compiled, the generated one stays interpreted): the generated
    one's parameters in order, its defaults, every field set."""
    taken = [f.name for f in dataclasses.fields(RunningAttempt) if f.init]
    assert taken == ["key", "started_at", "length", "first_at", "progress"]
    unset = {f.name: f.default for f in dataclasses.fields(RunningAttempt) if not f.init}
    assert unset == {"told_in": 0, "paced": False}
    try:
        parameters = list(inspect.signature(RunningAttempt).parameters.values())
    except ValueError:  # compiled: a signature mypyc cannot spell; the calls below still hold it
        parameters = None
    if parameters is not None:
        assert [p.name for p in parameters] == taken
        assert [p.default for p in parameters[3:]] == [None, None]
    progress = ByteMeter()
    made = RunningAttempt(("m", "a"), 1.5, None, 2.5, progress)
    assert [getattr(made, name) for name in taken] == [("m", "a"), 1.5, None, 2.5, progress]
    assert made == RunningAttempt(key=("m", "a"), started_at=1.5, length=None, first_at=2.5, progress=progress)
    bare = RunningAttempt(("m", "a"), 1.5, None)
    assert bare.first_at is None and bare.progress is None
    assert all(getattr(made, name) == default and getattr(bare, name) == default for name, default in unset.items())


def test_bytes_per_token_are_learned_as_a_moving_average_of_the_streams() -> None:
    """``bytes_per_token``: a stream's bytes over its tokens, the first taken as it is, then each moving the
    average a twentieth of the way (the expressions the router had inline: the same floats)."""
    rng = random.Random(3)
    learned: dict[str, float] = {}
    reference: dict[str, float] = {}
    for _ in range(500):
        progress = ByteMeter()
        progress.api = rng.choice(["chat", "responses"])
        progress.received_bytes = rng.randrange(1, 100_000)
        tokens = rng.randrange(1, 2_000)
        bytes_per_token(learned, progress, tokens)
        seen = progress.received_bytes / tokens
        known = reference.get(progress.api)
        reference[progress.api] = seen if known is None else known + (seen - known) / 20
        assert learned == reference


@dataclasses.dataclass
class _Kept:
    """The former ``Running``: the streams told kept by attempt key, with the attempt and whether its pace was."""

    base: Belief
    answers: int
    heard_at: float | None
    told: Belief | None = None
    said: dict[int, tuple[RunningAttempt, bool]] = dataclasses.field(default_factory=dict)
    view: Belief | None = None
    stale: bool = True


class _ReferenceViews:
    """``RunningViews`` as it was (kept here to hold the new code to it): the streams told kept by attempt key in a new
    ``Running`` whenever the belief heard, then the bounds over every attempt, streams or not."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], _Kept] = {}

    def moved(self, key: tuple[str, str]) -> None:
        running = self.kept.get(key)
        if running is not None:
            running.stale = True

    def view(
        self,
        key: tuple[str, str],
        belief: Belief,
        prior: Prior,
        attempts: dict[int, RunningAttempt],
        now: float,
        per_token: dict[str, float],
    ) -> Belief:
        running = self.kept.get(key)
        heard = belief.heard_at
        fresh = running is not None and running.base is belief and running.answers == belief.answers
        if running is None or not fresh or running.heard_at != heard:
            running = self.kept[key] = _Kept(belief, belief.answers, heard)
        since = heard if heard is not None else -math.inf
        said, told, paced = running.said, running.told, set[int]()
        for at, attempt in attempts.items():
            if attempt.first_at is None or attempt.started_at < since:
                continue
            before = said.get(at)
            ttft: float | None
            spt: float | None
            if before is not None and before[0] is attempt:
                if before[1]:
                    paced.add(at)
                    continue
                pace = pace_so_far(attempt, now, per_token)
                if pace is None or pace[1] is None:
                    continue
                ttft, spt = None, pace[1]
            else:
                pace = pace_so_far(attempt, now, per_token)
                if pace is None:
                    continue
                ttft, spt = pace
            said[at] = (attempt, spt is not None)
            if spt is not None:
                paced.add(at)
            if told is None:
                told = running.told = belief.copy()
            told.observe(now, prior, ttft, spt, uncached_tokens=None, mixed=False)
            running.view = None
        if running.view is not None and not running.stale:
            return running.view
        expected = belief.expected(now, None if belief.answers else prior)
        waited, slow = 0.0, 0.0
        for at, attempt in attempts.items():
            if attempt.first_at is None:
                wait = now - attempt.started_at
                waited = wait if wait > waited else waited
            elif at not in paced:
                slowness = slowness_of(attempt, now, per_token)
                slow = slowness if slowness > slow else slow
        ttft_bound = waited if waited > expected.ttft_s else None
        spt_bound = slow if slow > expected.s_per_token else None
        source = told if told is not None else belief
        if ttft_bound is not None or spt_bound is not None or told is not None:
            view = source.bounded(now, prior, ttft_bound, spt_bound, base=belief)
        else:
            view = belief
        running.view, running.stale = view, False
        return view


def _moved(key: tuple[str, str], *views: RunningViews | _ReferenceViews) -> None:
    for kept in views:
        kept.moved(key)


@pytest.mark.parametrize("seed", range(6))
def test_the_views_are_the_former_full_reading_exactly(seed: int) -> None:
    """Random attempts at one deployment (whole answers waiting, streams coming to their first token and on, some
    ending, the belief hearing answers between, plans at random times): every view is the one the former code made,
    float for float (``repr``), and is the same object where it kept one."""
    rng = random.Random(seed)
    belief, key, prior = Belief(hazard=Hazard()), ("m", "a"), NO_PRIOR
    views, reference = RunningViews(), _ReferenceViews()
    attempts: dict[int, RunningAttempt] = {}
    per_token: dict[str, float] = {}
    now, made, kept, streams_share = 100.0, 0, 0, rng.choice([0.0, 0.3, 0.8])
    for _ in range(10):
        now += 0.5
        belief.observe(now, prior, rng.uniform(0.2, 0.4), rng.uniform(0.004, 0.006))
    for _ in range(1500):
        now += rng.expovariate(20.0)
        roll = rng.random()
        if roll < 0.3 or not attempts:
            made += 1
            attempts[made] = RunningAttempt(key, now, None)
            _moved(key, views, reference)
        elif roll < 0.45:
            at = rng.choice(list(attempts))
            attempt = attempts[at]
            if attempt.first_at is None and rng.random() < streams_share:
                attempt.first_at, attempt.progress = now, ByteMeter()
                _moved(key, views, reference)
            elif attempt.progress is not None:
                cast(ByteMeter, attempt.progress).received_bytes += rng.randrange(0, 200)
        elif roll < 0.6:
            attempts.pop(rng.choice(list(attempts)))
            _moved(key, views, reference)
        elif roll < 0.65:
            belief.observe(now, prior, rng.uniform(0.2, 2.0), rng.uniform(0.004, 0.02))
        elif roll < 0.67:
            per_token["chat"] = 4.0
        if attempts:
            old = views.kept[key].view if key in views.kept else None
            new = views.view(key, belief, prior, attempts, now, per_token)
            assert repr(new) == repr(reference.view(key, belief, prior, attempts, now, per_token))
            kept += new is old
    assert kept > 50


def test_a_stream_told_before_the_belief_heard_is_read_as_the_former_code_read_it() -> None:
    """Streams told to one telling are not told to the next (when the belief heard since) unless begun no earlier
    than it heard (the tie: one begun, at its first token and told at the very time of the answer, is told again);
    one whose pace was told is a slowness bound again once the belief heard: it stalls, and the view reads it."""
    belief, key, prior = Belief(hazard=Hazard()), ("m", "a"), NO_PRIOR
    views, reference = RunningViews(), _ReferenceViews()
    per_token = {"chat": 4.0}
    now = 100.0
    for _ in range(10):
        now += 0.5
        belief.observe(now, prior, 0.3, 0.005)
    paced, tie = RunningAttempt(key, now, None, now + 0.3, ByteMeter()), RunningAttempt(key, now + 1.5, None)
    attempts = {1: paced}
    cast(ByteMeter, paced.progress).received_bytes = 4 * 41
    now += 1.5
    tie.first_at, tie.progress = now, ByteMeter()
    attempts[2] = tie
    seen = [views.view(key, belief, prior, attempts, now, per_token)]
    assert repr(seen[-1]) == repr(reference.view(key, belief, prior, attempts, now, per_token))
    assert paced.paced and tie.told_in == paced.told_in
    belief.observe(now, prior, 0.3, 0.005)  # heard at the tie's start
    for later in (1.0, 30.0):
        _moved(key, views, reference)
        seen.append(views.view(key, belief, prior, attempts, now + later, per_token))
        assert repr(seen[-1]) == repr(reference.view(key, belief, prior, attempts, now + later, per_token))
        assert tie.told_in != paced.told_in  # told again, to the new telling
        attempts.pop(2, None)  # ended: the paced stream is the only one left
    stalled = seen[-1].expected(now + 30.0).s_per_token
    assert stalled > 10 * belief.expected(now + 30.0).s_per_token  # the paced stream, stalled, is a bound again
