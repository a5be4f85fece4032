"""Streams told to a belief router by hand: a byte-counting meter, answers heard, a stream begun; a plan's copy of a
belief told streams."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.routing.belief import Belief
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate
from gateway.routing.priors import Prior
from tests.support.clock import FakeClock
from tests.support.samples import make_sample


class ByteMeter:
    """A stream's meter (``StreamProgress``): its bytes so far, of the chat API."""

    def __init__(self) -> None:
        self.received_bytes = 0
        self.api = "chat"


def hear_ten_answers(router: BeliefRouter, clock: FakeClock, candidates: Iterable[Candidate]) -> None:
    """Each of ``candidates`` streams ten answers in turn, 0.5 s apart: 0.3 s to first token, 200 tokens/s, 100 tokens
    of 4 bytes (so the router learns 4 bytes a token)."""
    candidates = tuple(candidates)
    for _ in range(10):
        for candidate in candidates:
            clock.advance(0.5)
            assert router.attempt_started(candidate)
            meter = ByteMeter()
            router.attempt_streaming(candidate, meter)
            meter.received_bytes = 400
            router.attempt_finished(
                candidate, make_sample(deployment=candidate.name, ttft_s=0.3, tokens_per_s=200.0, output_tokens=100)
            )


def begin_stream(router: BeliefRouter, clock: FakeClock, candidate: Candidate) -> ByteMeter:
    """An attempt started at ``candidate`` whose first token comes 0.3 s later: its meter, no bytes counted yet."""
    assert router.attempt_started(candidate)
    clock.advance(0.3)
    meter = ByteMeter()
    router.attempt_streaming(candidate, meter)
    return meter


def told(
    belief: Belief,
    now: float,
    prior: Prior,
    streams: Iterable[tuple[float, float | None]],
    ttft_at_least: float | None = None,
    spt_at_least: float | None = None,
) -> Belief:
    """A plan's copy of ``belief`` told ``streams`` (first token, pace so far), then the bounds, as
    ``RunningViews.view`` tells them."""
    copy = belief.copy()
    for ttft_s, s_per_token in streams:
        copy.observe(now, prior, ttft_s, s_per_token, uncached_tokens=None, mixed=False)
    return copy.bounded(now, prior, ttft_at_least, spt_at_least, base=belief)
