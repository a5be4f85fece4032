"""Hedged streams: a late first token starts a second attempt; the first token wins; nothing leaks.

The fake providers are steered per request (``fake.servers.<name>`` in the body) so that which
attempt is slow is known exactly. Thresholds and delays are far apart, so no assertion rests
on tight timing.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.relay.prompt_count import count_prompt
from gateway.samples import Sample
from gateway.tokens import load_token_counter
from tests.routing_sim import ADMIN_KEY, MESSAGES, Reply, Sim, SimProvider, Sims, sims_fixture  # noqa: F401 (the sims fixture)
from tests.support.wait import wait_until

QUICK = FakeBehavior(ttft_s=0.01, output_tokens=6)


def hedged_sim(sims: Sims, policy: dict[str, Any], b: FakeBehavior = QUICK) -> Sim:
    return sims.start(
        [SimProvider("a", QUICK, price_in=2.0), SimProvider("b", b, price_in=3.0)],
        policy={"extends": "fixed-order", **policy},
    )


def slow(server: str, ttft_s: float) -> dict[str, Any]:
    return {"fake": {"servers": {server: {"ttft_s": ttft_s}}}}


def samples_of(sim: Sim, n: int) -> list[Sample]:
    wait_until(lambda: len(sim.samples.samples) >= n)
    return list(sim.samples.samples)


def idle(sim: Sim) -> bool:
    """No upstream stream open at any fake, and no attempt in flight in the router."""
    routes = httpx.get(sim.gateway.url + "/v1/gateway/routes", headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
    in_flight = sum(d["in_flight"] for m in routes["data"] for d in m["deployments"])
    return in_flight == 0 and all(f.app.state.open_streams == 0 for f in sim.fakes.values())


def test_a_late_first_token_is_hedged_and_the_hedge_wins(sims: Sims) -> None:
    sim = hedged_sim(sims, {"hedge_after_s": 0.1, "hedge_budget": 1.0})
    reply = sim.chat(extra_body=slow("a", 3.0))
    assert (reply.provider, reply.route, reply.attempts) == ("b", "hedge", 2)
    assert reply.ttft_s is not None and reply.ttft_s < 1.5  # not the 3 s the primary would have taken
    assert reply.text.strip().startswith("the quick brown")
    loser, winner = sorted(samples_of(sim, 2), key=lambda s: s.outcome)
    assert (loser.deployment, loser.outcome, loser.hedged) == ("a", "client_cancelled", True)
    assert (winner.deployment, winner.outcome, winner.hedged) == ("b", "ok", True)
    # The loser waited past the threshold without a token: that wait is its TTFT's lower bound.
    assert loser.ttft_s is not None and 0.1 <= loser.ttft_s < 1.5
    # Its prompt was billed even though it was cancelled: no usage came, so as the pinned tokenizer counts it.
    counted = count_prompt({"messages": MESSAGES}, load_token_counter("o200k_base"))
    assert loser.cost_usd == pytest.approx(counted * 2.0 / 1e6)
    assert ("hedge_started", "m", "a", "b") in sim.events.events
    assert ("hedge_won", "m", "b") in sim.events.events
    wait_until(lambda: sim.fakes["a"].app.state.cancelled == 1)
    wait_until(lambda: idle(sim))


def test_the_primary_can_still_win_and_the_hedge_is_cancelled(sims: Sims) -> None:
    sim = hedged_sim(sims, {"hedge_after_s": 0.05, "hedge_budget": 1.0})
    reply = sim.chat(extra_body={"fake": {"servers": {"a": {"ttft_s": 0.25}, "b": {"ttft_s": 3.0}}}})
    assert (reply.provider, reply.route, reply.attempts) == ("a", "best-score", 2)
    by_deployment = {s.deployment: s for s in samples_of(sim, 2)}
    assert by_deployment["a"].outcome == "ok" and by_deployment["a"].hedged
    assert by_deployment["b"].outcome == "client_cancelled" and by_deployment["b"].hedged
    assert by_deployment["b"].ttft_s is None  # a hedge cut short says nothing of its own first token
    assert ("hedge_lost", "m", "b") in sim.events.events
    wait_until(lambda: idle(sim))


def test_a_failing_primary_leaves_the_hedge_running(sims: Sims) -> None:
    sim = hedged_sim(sims, {"hedge_after_s": 0.05, "hedge_budget": 1.0})
    body = {"fake": {"servers": {"a": {"ttft_s": 0.2, "drop_after": 0}, "b": {"ttft_s": 0.4}}}}
    reply = sim.chat(extra_body=body)
    assert (reply.provider, reply.route, reply.attempts) == ("b", "hedge", 2)
    outcomes = {s.deployment: s.outcome for s in samples_of(sim, 2)}
    assert outcomes == {"a": "broken_stream", "b": "ok"}
    wait_until(lambda: idle(sim))


def test_no_hedge_when_the_first_token_is_on_time_or_the_request_is_not_streamed(sims: Sims) -> None:
    sim = hedged_sim(sims, {"hedge_after_s": 0.5, "hedge_budget": 1.0})
    assert [(r.provider, r.attempts) for r in sim.run(5)] == [("a", 1)] * 5
    full = sim.chat(stream=False, extra_body=slow("a", 0.7))
    assert (full.provider, full.attempts) == ("a", 1)
    assert sim.fakes["b"].app.state.requests == 0


def test_the_budget_caps_hedges(sims: Sims) -> None:
    sim = hedged_sim(sims, {"hedge_after_s": 0.02, "hedge_budget": 0.2})
    replies = [sim.chat(extra_body=slow("a", 0.1)) for _ in range(20)]
    hedged = sum(r.attempts == 2 for r in replies)
    assert 3 <= hedged <= 6  # 20% of 20, plus a burst of at most two
    assert sim.fakes["b"].app.state.requests == hedged
    wait_until(lambda: idle(sim))


def test_a_client_gone_during_the_race_cancels_both(sims: Sims) -> None:
    sim = hedged_sim(sims, {"hedge_after_s": 0.05, "hedge_budget": 1.0}, b=dataclasses.replace(QUICK, ttft_s=5))
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True, **slow("a", 5.0)}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim.gateway.url + "/v1/chat/completions", json=body, timeout=0.4)
    wait_until(lambda: idle(sim))
    samples = samples_of(sim, 2)
    assert {(s.deployment, s.outcome, s.hedged) for s in samples} == {
        ("a", "client_cancelled", True),
        ("b", "client_cancelled", True),
    }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


TAIL_TTFT_S = 0.8
TAIL_EVERY = 20


def _in_tail(i: int) -> bool:
    """Whether request ``i`` of a heavy-tail run meets the slow first token (every 20th, after a warm-up)."""
    return i % TAIL_EVERY == 13


def _heavy_tail_run(sim: Sim, n: int) -> list[Reply]:
    """``n`` requests, 4 at a time; every 20th (after a warm-up) meets a 30x slower first token at "a"."""

    def one(i: int) -> Reply:
        return sim.chat(extra_body=slow("a", TAIL_TTFT_S) if _in_tail(i) else None)

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(n)))


def test_hedging_cuts_the_client_p99_ttft_of_a_heavy_tail(sims: Sims) -> None:
    steady = dataclasses.replace(QUICK, ttft_s=0.025)
    # The hedge waits at least 0.15 s: far above a steady first token on a quiet machine. On a busy one the steady
    # first tokens spread, and a's own p90 with them: about a tenth of ordinary requests then pass it and are hedged
    # too. The budget (a fifth of requests) covers them and the tail requests (one in twenty) together.
    policy = {"min_samples": 5, "hedge_min_after_s": 0.15, "hedge_budget": 0.2}
    # The baseline hedges nothing: tail hedging is on by default, and would cut the tail it measures.
    plain = sims.start(
        [SimProvider("a", steady), SimProvider("b", steady)], policy={"extends": "fixed-order", "hedge_quantile": False}
    )
    hedged = sims.start(
        [SimProvider("a", steady), SimProvider("b", steady)],
        policy={"extends": "fixed-order", "hedge_quantile": 0.9, **policy},
    )
    # 200 requests, so that the p99 is not the single slowest one: one request lies above it.
    n = 200
    above_p99 = n - 1 - int(0.99 * n)
    without = _heavy_tail_run(plain, n)
    replies = _heavy_tail_run(hedged, n)
    tail_at = [i for i in range(n) if _in_tail(i)]
    # Counted, not timed: a machine busy enough stalls ordinary requests for longer than the hedge saves (a loaded run
    # saw a few near a second), so the client's TTFT percentiles measure the machine as much as the hedge. What hedging
    # changes is who answers the tail: without it, every tail request waits out a's slow first token (the fake's
    # own delay, which no load shortens), and those are 5% of requests, so the p99 is one of them.
    assert all(without[i].provider == "a" and (without[i].ttft_s or 0.0) >= TAIL_TTFT_S for i in tail_at)
    assert _p99([r.ttft_s or 0.0 for r in without]) >= TAIL_TTFT_S
    # With it, a tail request's first token comes from the hedge: b's, sent while a's was late, and first to the
    # client (the first token wins). At most as many as the p99 leaves above it still wait for a's (a hedge the
    # budget could not pay, or one that lost to its primary), so the p99 is no slow first token.
    waited = [i for i in tail_at if replies[i].provider == "a"]
    tail = [(i, replies[i].provider, replies[i].route, replies[i].attempts, replies[i].ttft_s) for i in tail_at]
    assert len(waited) <= above_p99, tail
    assert all((replies[i].provider, replies[i].route) == ("b", "hedge") for i in tail_at if i not in waited), tail
    extra = hedged.fakes["b"].app.state.requests
    assert len(tail_at) - len(waited) <= extra <= 0.2 * n + 2  # the tail requests, within the budget


def test_a_look_raced_beside_the_leader_runs_two_attempts_and_drains_the_one_that_loses(sims: Sims) -> None:
    # "look" starts 25 times later and streams half again as fast: slower in all for the answers expected, so not
    # the leader. Racing it costs a request no time (the earlier first token answers, and should look's come first,
    # its stream is the quicker), so a look at it is raced beside the leader, not shadowed: both start at once, the
    # leader's first token wins and answers, and the look is read on unseen until its stream is measured (drained),
    # never the client's answer.
    # Rates a traced gateway on a slow machine still measures: a stream of one token an event read ~900 tokens/s at
    # most under coverage on a slow VM, so "look" at 1,500 read slower than "lead" at 1,000 and was shadowed, not raced.
    streaming = FakeBehavior(ttft_s=0.01, tokens_per_s=500, output_tokens=300)
    later = dataclasses.replace(streaming, ttft_s=0.25, tokens_per_s=750)
    sim = sims.start(
        [SimProvider("lead", streaming), SimProvider("look", later)],
        policy={"explore_share": 0.9, "hedge_tail": False},
    )
    sim.chat()  # the cold race: both measured, lead's first token wins
    wait_until(lambda: idle(sim), what="the cold start's attempts ended")
    warm = len(sim.samples.samples)
    replies: list[Reply] = []
    for _ in range(12):
        replies.append(sim.chat())
        if replies[-1].attempts > 1:
            break
    raced = replies[-1]
    assert raced.attempts == 2, [(r.provider, r.route, r.attempts) for r in replies]  # a look, raced
    assert all(r.provider == "lead" for r in replies)  # the look never answered: its first token came second
    assert raced.route == "best-score"  # the leader answered its race as the leader, not as a hedge
    assert raced.text.strip().startswith("the quick brown")
    wait_until(lambda: idle(sim), what="the look drained")
    race = sim.samples.samples[warm:][-2:]
    outcomes = sorted((s.deployment, s.outcome, s.hedged) for s in race)
    assert outcomes == [("lead", "ok", True), ("look", "client_cancelled", True)], outcomes
    (loser,) = [s for s in race if s.deployment == "look"]
    # Measured unseen: its real first token and speed, and only the first of its answer's events read.
    assert loser.ttft_s is not None and loser.ttft_s >= later.ttft_s and loser.tokens_per_s is not None
    assert loser.output_tokens is not None and loser.output_tokens < streaming.output_tokens
