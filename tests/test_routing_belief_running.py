"""The belief router's running attempts told as they change (``gateway.routing.belief_running``), not at every plan."""

from __future__ import annotations

import dataclasses
import inspect
import random

from gateway.routing.belief import Belief
from gateway.routing.belief_attempts import RunningAttempt, bytes_per_token
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate
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
    (pooled from ``b``, which did not move) is kept, and of the beliefs as ``pooled`` reads them only ``a``'s is read
    again. A failure moves no level: no prior is pooled again."""
    router, clock, a = _heard()
    keys = [(a.model, "a"), (a.model, "b")]
    priors = {k: router.priors[k] for k in keys}
    read = {k: router._heard[k][2] for k in keys}
    clock.advance(0.5)
    assert router.attempt_started(a)
    router.attempt_finished(a, make_sample(deployment="a", ttft_s=0.4, tokens_per_s=150.0, output_tokens=100))
    assert router.priors[keys[0]] is priors[keys[0]]
    assert router.priors[keys[1]] is not priors[keys[1]]
    assert router._heard[keys[0]][2] is not read[keys[0]]
    assert router._heard[keys[1]][2] is read[keys[1]]
    priors = {k: router.priors[k] for k in keys}
    clock.advance(0.5)
    assert router.attempt_started(a)
    router.attempt_finished(a, make_sample(deployment="a", outcome="upstream_error", ttft_s=None))
    assert all(router.priors[k] is priors[k] for k in keys)


def test_a_running_attempts_written_init_takes_and_sets_what_the_generated_one_would() -> None:
    """``RunningAttempt.__init__`` is written out (compiled, the generated one stays interpreted): the generated
    one's parameters in order, its defaults, every field set."""
    taken = [f.name for f in dataclasses.fields(RunningAttempt)]
    assert taken == ["key", "started_at", "length", "first_at", "progress"]
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
