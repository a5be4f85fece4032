"""What a finished attempt tells its deployment's belief (``gateway.routing.belief_attempts.tell``), through the
real belief router in simulated time (the replicas' rig of ``tests.test_routing_belief_replicas``)."""

from __future__ import annotations

import dataclasses

from tests.support.samples import make_sample
from tests.test_routing_belief_replicas import replicas


def test_a_raced_loser_whose_first_token_came_is_heard_at_that_first_token() -> None:
    """The demo's case: a deployment heard only as a race's loser, whose first token came with the winner's. Told
    as "at least 1.16 s" its level, barely known, went to ~7 s; it is a first token of 1.16 s."""
    clock, (one,) = replicas(1)
    for _ in range(5):
        clock.advance(0.5)
        one.answer("a", make_sample(deployment="a", ttft_s=0.4, tokens_per_s=60.0))
    clock.advance(0.5)
    lost = make_sample(deployment="b", outcome="client_cancelled", ttft_s=1.16, tokens_per_s=None, output_tokens=None)
    one.answer("b", dataclasses.replace(lost, hedged=True))
    assert one.answers("b") == 1
    first_token = one.router.belief("m", "b").expected(clock()).ttft_s
    assert 0.8 < first_token < 1.6, first_token
