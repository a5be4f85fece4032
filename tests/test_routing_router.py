"""The measured router on a real in-memory stats store, with seeded randomness and an injected clock."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from typing import Any

import pytest

from gateway.config import GatewayConfig, StatsConfig
from gateway.errors import InvalidRequest, NoCapacity
from gateway.events import EventLog
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.capacity import BACKOFF_FLOOR
from gateway.routing.estimates import TYPICAL_BYTES_PER_TOKEN
from gateway.routing.explain import ranking_table
from gateway.routing.explore import WAITING_MAX
from gateway.routing.plan import Candidate
from gateway.routing.ranking import Ranking
from gateway.routing.router import MeasuredRouter
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore
from tests.support.clock import FakeClock
from tests.support.config import routing_config
from tests.support.samples import sample, samples
from tests.support.streams import Stream


class Rig:
    """A router over a real in-memory store, all time under the test's control."""

    def __init__(self, config: GatewayConfig, seed: int = 7) -> None:
        self.clock = FakeClock()
        self.config = config
        self.store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=1), wall_clock=self.clock)
        self.events = EventLog()
        self.router = MeasuredRouter(config, self.store, rng=random.Random(seed), clock=self.clock, events=self.events)

    def feed(self, batch: list[Sample]) -> None:
        for s in batch:
            self.store.record(s)

    def request(
        self, *, max_tokens: int | None = None, stream: bool = True, preferences: ProviderPreferences | None = None
    ) -> RouteRequest:
        return RouteRequest(
            model=self.config.models[0],
            endpoint="chat",
            stream=stream,
            prompt_tokens=100,
            max_tokens=max_tokens,
            preferences=preferences or ProviderPreferences(),
        )

    def order(self, **options: Any) -> list[str]:
        return [c.name for c in self.router.plan(self.request(**options)).candidates]

    def first(self, *, stream: bool = True) -> Candidate:
        return self.router.plan(self.request(stream=stream)).candidates[0]

    def explored(self) -> list[str]:
        """The deployments one request measures: its probe, and the probe racing beside it, if any."""
        return [c.name for c in self.router.plan(self.request()).candidates if c.reason == "explore"]

    def candidate(self, name: str) -> Candidate:
        for c in self.router.plan(self.request()).candidates:
            if c.name == name:
                return c
        raise AssertionError(f"{name} not in the plan")

    def finish(self, name: str, outcome: str = "ok", retry_after_s: float | None = None) -> None:
        candidate = self.candidate_any(name)
        assert self.router.attempt_started(candidate)
        result = sample(name, outcome=outcome, started_at=self.clock.now)  # type: ignore[arg-type]
        self.router.attempt_finished(candidate, result, retry_after_s)

    def candidate_any(self, name: str) -> Candidate:
        model = self.config.models[0]
        deployment = next(d for d in model.deployments if d.name == name)
        return Candidate(deployment, self.config.provider(deployment.provider), model=model.name)


def judged(rig: Rig, name: str, n: int = 20, ttft: float = 0.5, tps: float = 100.0) -> None:
    rig.feed(samples(name, n, ttft=ttft, tps=tps, started_at=rig.clock.now))


def test_best_score_first_then_fallbacks() -> None:
    rig = Rig(routing_config([("slow", 1, 1), ("fast", 1, 1), ("mid", 1, 1)]))
    judged(rig, "slow", ttft=2.0)
    judged(rig, "fast", ttft=0.2)
    judged(rig, "mid", ttft=0.8)
    plan = rig.router.plan(rig.request())
    assert [c.name for c in plan.candidates] == ["fast", "mid", "slow"]
    assert [c.reason for c in plan.candidates] == ["best-score", "fallback", "fallback"]
    assert rig.events.events[-1] == ("decision", "m", "fast", "best-score")


def answered(rig: Rig, name: str, n: int = 1, ttft: float = 0.5, tps: float = 100.0, every_s: float = 0.0) -> None:
    """``n`` answers from ``name`` as the relay reports them: to the router (its fast view) and to the store."""
    for _ in range(n):
        candidate = rig.candidate_any(name)
        assert rig.router.attempt_started(candidate)
        result = sample(name, ttft=ttft, tps=tps, started_at=rig.clock.now)
        rig.store.record(result)
        rig.router.attempt_finished(candidate, result)
        rig.clock.now += every_s


def test_a_deployment_with_nothing_measured_is_probed_once_then_competes_on_its_answers() -> None:
    rig = Rig(routing_config([("known", 1, 1), ("new", 1, 1)], policy={"explore_share": 0.0}))
    judged(rig, "known", ttft=0.5)
    first = rig.first()
    assert (first.name, first.reason) == ("new", "explore")  # the cold start needs no budget
    assert rig.router.attempt_started(first)
    assert rig.first().name == "known"  # one probe at a time until it answers
    result = sample("new", ttft=1.6, started_at=rig.clock.now)
    rig.store.record(result)
    rig.router.attempt_finished(first, result)
    assert all(rig.first().name == "known" for _ in range(20))  # measured: slower, so not chosen
    # A probe (a leader was measured), but a first look: the one kind the budget pays for whatever it holds.
    ranking = rig.router.rank(rig.config.models[0])
    assert (ranking.probes, ranking.first_looks, ranking.cold_starts) == (1, 1, 0)
    assert "1 first look at deployments never measured" in ranking_table(ranking)


def test_exploration_share_is_bounded_at_every_moment() -> None:
    rig = Rig(routing_config([("known", 1, 1), ("old", 1, 1)], policy={"explore_share": 0.05}))
    answered(rig, "old", 5, ttft=0.6)
    rig.clock.now += 60  # "old" has not been heard from for a minute: it may have changed
    answered(rig, "known", 20, ttft=0.5)
    firsts = [rig.first() for _ in range(4000)]
    reasons = Counter((c.name, c.reason) for c in firsts)
    assert set(reasons) == {("known", "best-score"), ("old", "explore")}
    assert 0.0475 < reasons["old", "explore"] / 4000 <= 0.05
    # Not only on average: the budget starts empty, so no run is ever ahead of its share (a probe in hand at
    # the start put 90 s runs at 5.2% of 5%).
    probes = itertools.accumulate(c.reason == "explore" for c in firsts)
    assert all(explored <= 0.05 * requests for requests, explored in enumerate(probes, start=1))
    ranking = rig.router.rank(rig.config.models[0])
    assert ranking.probes == reasons["old", "explore"] and ranking.requests == 4000


def test_exploration_goes_where_an_estimate_is_stale_or_thin_not_where_it_is_fresh_and_hopeless() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("far", 1, 1), ("thin", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "far", 20, ttft=5.0, tps=1e4)  # ten times slower, measured just now
    answered(rig, "b", 20, ttft=0.7, tps=1e4)  # a little slower, measured just now
    answered(rig, "thin", 1, ttft=0.7, tps=1e4)  # as slow, on one answer
    answered(rig, "a", 20, ttft=0.5, tps=1e4)
    plans = [rig.router.plan(rig.request()) for _ in range(400)]
    fresh = Counter(next((c.name for c in p.candidates if c.reason == "explore"), None) for p in plans)
    assert fresh["far"] == fresh["b"] == 0 and fresh["thin"] > 0  # only thin evidence leaves room for doubt
    # The others ride along in thin's races as its partner, the one probed longest ago first: a look that costs no
    # probe of the budget, where a recovery would show.
    partners = Counter(p.race_partner for p in plans if p.race_probe == "thin")
    assert partners["b"] > 0 and partners["far"] > 0 and set(partners) <= {"b", "far"}
    rows = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}
    assert rows["far"].scored.optimistic > rows["a"].scored.ranked_by
    rig.clock.now += 60  # a minute without news of anyone but "a"
    answered(rig, "a", 5, ttft=0.5, tps=1e4)
    stale = Counter(name for _ in range(400) for name in rig.explored())
    assert stale["far"] > 0 and stale["b"] > 0  # now even the far one may have recovered
    rows = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}
    assert rows["far"].scored.bonus > 4 * rows["a"].scored.bonus
    assert rows["far"].scored.prediction.age_s == 60.0


def test_exploration_spends_on_short_requests_and_never_races_a_long_answer_to_a_slow_streamer() -> None:
    rig = Rig(routing_config([("bulk", 1, 1), ("snappy", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "snappy", 20, ttft=0.25, tps=40.0)
    answered(rig, "bulk", 20, ttft=1.2, tps=260.0)
    rig.clock.now += 60  # both stale: both worth a look
    for _ in range(50):  # the traffic: answers of 8 or 800 tokens
        rig.router.plan(rig.request(max_tokens=8))
        rig.router.plan(rig.request(max_tokens=800))
    long = [rig.router.plan(rig.request(max_tokens=800)) for _ in range(200)]
    assert all(p.candidates[0].name == "bulk" and p.candidates[0].reason == "best-score" for p in long)
    short = [rig.router.plan(rig.request(max_tokens=8)) for _ in range(200)]
    assert any(p.candidates[0].reason == "explore" and p.candidates[0].name == "bulk" for p in short)


def test_a_contender_no_race_is_affordable_for_is_measured_in_the_leaders_shadow() -> None:
    # Every answer is long: snappy would win the first token and then stream 800 tokens at 40/s. It is sent beside
    # the leader instead, never the answer (``gateway.relay.drain``): the leader serves, first, as if unexplored.
    rig = Rig(routing_config([("bulk", 1, 1), ("snappy", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "snappy", 20, ttft=0.25, tps=40.0)
    rig.clock.now += 60  # snappy stale: worth a look
    answered(rig, "bulk", 20, ttft=1.2, tps=260.0)
    plans = [rig.router.plan(rig.request(max_tokens=800)) for _ in range(40)]
    assert all(p.race == () and p.candidates[0].name == "bulk" for p in plans)
    assert all(p.candidates[0].reason == "best-score" for p in plans)
    shadowed = [p for p in plans if p.shadow is not None]
    assert shadowed and all(p.shadow.name == "snappy" for p in shadowed if p.shadow is not None)
    shadow = shadowed[0].shadow
    assert shadow is not None and (shadow.reason, shadow.hedge_after_s) == ("explore", None)
    assert rig.router.rank(rig.config.models[0]).probes == len(shadowed)  # each counts as a probe


def test_a_probe_races_the_leader_on_a_stream_and_goes_first_otherwise() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "b", 5, ttft=0.6)
    rig.clock.now += 60
    answered(rig, "a", 20, ttft=0.4)
    plans = [rig.router.plan(rig.request()) for _ in range(40)]
    raced = next(p for p in plans if p.race_probe is not None)
    assert [(c.name, c.reason) for c in raced.candidates] == [("b", "explore"), ("a", "fallback")]
    # The leader starts at once beside it (the first token wins); the race needs no hedge budget.
    assert raced.candidates[0].hedge_after_s == 0.0
    assert rig.router.try_hedge(raced)
    unstreamed = [rig.router.plan(rig.request(stream=False)) for _ in range(40)]
    probe = next(p for p in unstreamed if p.candidates[0].reason == "explore")
    assert probe.race_probe is None and probe.candidates[0].name == "b" and probe.candidates[0].hedge_after_s is None


def test_among_four_or_more_a_race_probe_measures_two_contenders_at_once() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1), ("d", 1, 1)], policy={"explore_share": 0.5}))
    for name in "bcd":
        answered(rig, name, 5, ttft=0.6)
    rig.clock.now += 60  # none of them heard from for a minute: each may have become the best
    answered(rig, "a", 20, ttft=0.4)
    plans = [rig.router.plan(rig.request()) for _ in range(40)]
    pair = next(p for p in plans if p.race_partner is not None)
    first, second, leader = pair.candidates[:3]
    assert (first.reason, second.reason, leader.name, leader.reason) == ("explore", "explore", "a", "fallback")
    assert {first.name, second.name} <= {"b", "c", "d"} and first.name != second.name
    assert (pair.race_probe, pair.race_partner, pair.race_width) == (first.name, second.name, 3)
    # All three start at once (the first token wins); no hedge budget spent.
    assert first.hedge_after_s == 0.0 and second.hedge_after_s == 0.0
    assert rig.router.try_hedge(pair)
    # One request, one probe: the share counts requests; both contenders count as probed (the rotation moves on).
    measured = Counter(name for p in plans for name in (p.race_probe, p.race_partner) if name)
    assert set(measured) == {"b", "c", "d"}
    ranking = rig.router.rank(rig.config.models[0])
    assert ranking.probes == sum(1 for p in plans if p.race_probe)


def test_with_three_deployments_a_race_probe_takes_the_other_contender_whatever_its_bonus() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "b", 5, ttft=0.6)
    rig.clock.now += 60  # b unheard for a minute: it may have become the best
    answered(rig, "a", 20, ttft=0.4)
    answered(rig, "c", 20, ttft=3.0)  # c just measured, far behind: no bonus reaches the leader
    plans = [rig.router.plan(rig.request()) for _ in range(40)]
    pair = next(p for p in plans if p.race_probe is not None)
    # c rides along: its look costs no budget, and a recovery of c would be seen on b's probes too.
    assert (pair.race_probe, pair.race_partner, pair.race_width) == ("b", "c", 3)
    assert [c.reason for c in pair.candidates] == ["explore", "explore", "fallback"]
    # c still streaming an answer sent just now: the next race does not wait for it, nor take it.
    assert rig.router.attempt_started(rig.candidate_any("c"))
    plans = [rig.router.plan(rig.request()) for _ in range(40)]
    assert any(p.race_probe == "b" for p in plans)
    assert all(p.race_partner is None for p in plans)
    # Ten seconds on and still streaming (a slow answer from before a recovery would hide it until it ends): taken.
    rig.clock.now += 10
    plans = [rig.router.plan(rig.request()) for _ in range(40)]
    assert any(p.race_probe == "b" and p.race_partner == "c" for p in plans)


def test_a_partner_with_no_cheap_race_is_measured_in_the_shadow_of_the_probes_race() -> None:
    # c is the quicker to its first token but streams ten times slower (the shape of a provider whose speed fell):
    # racing it on a long answer would hand it the answer. It goes beside b's race unseen instead, every time.
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "b", 5, ttft=0.6)
    answered(rig, "c", 5, ttft=0.1, tps=10.0)
    rig.clock.now += 60  # neither heard from for a minute
    answered(rig, "a", 20, ttft=0.4)
    plans = [rig.router.plan(rig.request(max_tokens=512)) for _ in range(40)]
    raced = [p for p in plans if p.race_probe is not None]
    assert raced and all(p.race_probe == "b" and p.race_partner is None and p.race_width == 2 for p in raced)
    assert all(p.shadow is not None and p.shadow.name == "c" for p in raced)
    shadow = raced[0].shadow
    assert shadow is not None and (shadow.reason, shadow.hedge_after_s) == ("explore", None)
    # The request counts once against the budget, as a pair does.
    assert rig.router.rank(rig.config.models[0]).probes == len(raced)


def test_a_race_lost_to_the_first_token_refreshes_the_loser_without_an_answer() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "b", 5, ttft=0.6)
    rig.clock.now += 60
    answered(rig, "a", 20, ttft=0.4)
    stale = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}[
        "b"
    ].scored.prediction.uncertainty
    plan = next(p for p in (rig.router.plan(rig.request()) for _ in range(40)) if p.race_probe)
    probe = plan.candidates[0]
    assert rig.router.attempt_started(probe)
    rig.clock.now += 0.45  # the leader's token came first: the probe is cancelled, still waiting
    lost = dataclasses.replace(sample("b", outcome="client_cancelled"), hedged=True)
    rig.router.attempt_finished(probe, lost)
    row = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}["b"]
    # Its first token is known to be no faster than that again; of its stream it says nothing.
    assert row.scored.prediction.uncertainty.ttft < stale.ttft / 2
    assert row.scored.prediction.uncertainty.tokens_per_s == pytest.approx(stale.tokens_per_s)
    assert row.scored.prediction.answers == 5


def test_a_burst_at_cold_start_probes_each_deployment_once_then_spreads() -> None:
    # Unstreamed: no race to run, so one probe per deployment, then requests spread by load.
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)]))
    probes = []
    for _ in range(3):
        first = rig.first(stream=False)
        assert first.reason == "explore"
        assert rig.router.attempt_started(first)
        probes.append(first)
    assert sorted(p.name for p in probes) == ["a", "b", "c"]
    # Each has an attempt out and no answer yet: nothing to follow, so requests spread by load.
    spread = []
    for _ in range(3):
        first = rig.first(stream=False)
        assert first.reason == "best-score"
        assert rig.router.attempt_started(first)
        spread.append(first.name)
    assert sorted(spread) == ["a", "b", "c"]


def test_streams_race_every_deployment_until_a_first_token_comes() -> None:
    # A stream that arrives while the cold race runs, with no first token anywhere yet, is a cold race of
    # its own: spread blind, a third of such requests would land on the slowest deployment.
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)]))
    started = []
    for _ in range(3):
        plan = rig.router.plan(rig.request())
        assert sorted(plan.race) == ["a", "b", "c"]
        assert all(c.reason == "explore" for c in plan.candidates)
        for candidate in plan.candidates:
            assert rig.router.attempt_started(candidate)
            started.append(candidate)
    # The first token of one of them is news: the next requests follow it, no longer racing blind.
    rig.clock.now += 0.3
    rig.router.attempt_streaming(started[0], Stream())
    plan = rig.router.plan(rig.request())
    assert plan.race == ()
    assert plan.candidates[0].name == started[0].name
    # With nothing measured there was no leader to explore away from: these were cold starts, not probes,
    # and the budget did not pay for them (the explanation says so).
    ranking = rig.router.rank(rig.config.models[0])
    assert (ranking.requests, ranking.probes, ranking.races, ranking.cold_starts) == (4, 0, 0, 3)
    assert "explored 0 of 4 requests" in ranking_table(ranking) and "besides 3 cold starts" in ranking_table(ranking)
    assert rig.router.memory.explore.tokens["m"] == pytest.approx(4 * 0.05)


def attempts_out(rig: Rig, name: str, n: int) -> None:
    """``n`` attempts started at ``name`` and still out: no first token, no answer."""
    for _ in range(n):
        assert rig.router.attempt_started(rig.candidate_any(name))


def test_long_answers_go_to_an_unmeasured_deployment_while_the_measured_one_streams_slowly() -> None:
    # A cold start: "snappy" won the cold races on its first token (0.25 s) and has answered, streaming at 40
    # tokens/s; "bulk" has three attempts out and no first token yet. By the model's average (snappy's, the only
    # one measured) bulk streams at 40 too, and an 800-token answer would take 20 s wherever it went.
    rig = Rig(routing_config([("snappy", 1, 1), ("bulk", 1, 1)]))
    attempts_out(rig, "bulk", 3)
    answered(rig, "snappy", 2, ttft=0.25, tps=40.0)

    def first(max_tokens: int) -> Candidate:
        return rig.router.plan(rig.request(max_tokens=max_tokens)).candidates[0]

    long = first(800)
    assert (long.name, long.reason) == ("bulk", "explore")  # taken at a typical speed, not the slow one's
    assert first(8).name == "snappy"  # a short answer is its first token: the measured low latency keeps it
    # A cold start, not a probe: the exploration budget does not pay for it.
    ranking = rig.router.rank(rig.config.models[0])
    assert ranking.probes == 0 and ranking.cold_starts == 1
    # Bounded: once bulk has WAITING_MAX attempts out, long answers stay with the measured one.
    attempts_out(rig, "bulk", WAITING_MAX - 4)
    assert first(800).name == "bulk"
    attempts_out(rig, "bulk", 1)
    assert first(800).name == "snappy"


def test_before_any_stream_ends_a_slow_leaders_pace_is_guessed_from_its_bytes() -> None:
    # Six long answers in the first second: snappy's first tokens came, none of its streams has ended, so there is
    # no envelope to read its bytes as tokens by. Its pace is guessed from them at a typical envelope: 40 tokens/s.
    rig = Rig(routing_config([("snappy", 1, 1), ("bulk", 1, 1)]))
    attempts_out(rig, "bulk", 3)
    stream = Stream()
    candidate = rig.candidate_any("snappy")
    assert rig.router.attempt_started(candidate)
    rig.clock.now += 0.25
    rig.router.attempt_streaming(candidate, stream)
    rig.clock.now += 0.5
    stream.received_bytes = int(0.5 * 40 * TYPICAL_BYTES_PER_TOKEN["chat"])
    leader = rig.router.rank(rig.config.models[0], max_tokens=800).rows[0]
    assert leader.deployment.name == "snappy" and leader.scored.prediction.seconds_per_token is None
    assert leader.scored.prediction.guessed_seconds_per_token == pytest.approx(1 / 40)
    plan = rig.router.plan(rig.request(max_tokens=800))
    assert (plan.candidates[0].name, plan.candidates[0].reason) == ("bulk", "explore")
    # At 150 tokens/s the same bytes say a fast streamer: the long answer stays with it.
    stream.received_bytes = int(0.5 * 150 * TYPICAL_BYTES_PER_TOKEN["chat"])
    assert rig.router.plan(rig.request(max_tokens=800)).candidates[0].name == "snappy"


def test_a_measured_leader_that_streams_fast_keeps_long_answers_at_a_cold_start() -> None:
    rig = Rig(routing_config([("snappy", 1, 1), ("bulk", 1, 1)]))
    attempts_out(rig, "bulk", 3)
    answered(rig, "snappy", 2, ttft=0.25, tps=260.0)
    assert all(rig.router.plan(rig.request(max_tokens=800)).candidates[0].name == "snappy" for _ in range(20))


def test_answers_in_one_chunk_do_not_run_the_exploration_budget_into_debt() -> None:
    # Both answer 8 tokens in one chunk: their streams are never measured. Until the model's answers
    # are known to be short, a request looks long enough to measure one; each deployment would get one
    # such probe free, as it gets its first, later ones spending the budget like any other probe. (Free
    # every time, they took every request for twenty, and the debt they left silenced exploration for
    # the next two hundred, whatever happened meanwhile.) The answers' length is learned from the first
    # answer (``gateway.routing.lengths``): after the cold start no request looks long.
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"explore_share": 0.1, "min_samples": 3}))

    def serve(requests: int) -> list[Candidate]:
        served = []
        for _ in range(requests):
            first = rig.first()
            served.append(first)
            assert rig.router.attempt_started(first)
            ttft = 0.02 if first.name == "a" else 0.05
            result = sample(first.name, ttft=ttft, tps=None, tokens=8, started_at=rig.clock.now)
            rig.store.record(result)
            rig.router.attempt_finished(first, result)
            rig.clock.now += 0.05
        return served

    cold_start = serve(40)
    probes = [(i, c.name) for i, c in enumerate(cold_start) if c.reason == "explore"]
    assert len(probes) == 2 and {name for _, name in probes} == {"a", "b"}, probes  # each measured once
    # b not heard of for 30 s: its estimate is stale. The budget started empty: forty requests at 10%
    # filled it, and no long-looking request spent it meanwhile, so a look is paid for.
    rig.clock.now += 30
    assert any(c.name == "b" and c.reason == "explore" for c in serve(10))


def test_a_deployment_on_a_few_answers_is_not_probed_again_before_they_come_back() -> None:
    # Every other request may explore: only the probe in flight holds the next ones back.
    rig = Rig(routing_config([("steady", 1, 1), ("lucky", 1, 1)], policy={"explore_share": 0.5}))
    answered(rig, "steady", 30, ttft=0.5)
    answered(rig, "lucky", 1, ttft=0.3)  # one fast answer: its wide bonus reaches the leader
    assert rig.first().name == "steady"  # half a probe in the budget
    probe = rig.first()
    assert (probe.name, probe.reason) == ("lucky", "explore")
    assert rig.router.attempt_started(probe)
    # One attempt out per answer back: the well-measured one serves until it answers.
    assert all(rig.first().name == "steady" for _ in range(20))


def test_a_slowdown_shows_in_the_last_answers_and_the_estimate_holds_until_new_ones_come() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    judged(rig, "a", n=200, ttft=0.2, tps=1e4)  # a long, fast history in the window
    judged(rig, "b", n=200, ttft=0.4, tps=1e4)
    answered(rig, "a", 20, ttft=0.2, tps=1e4)
    answered(rig, "b", 20, ttft=0.4, tps=1e4)
    assert rig.first().name == "a"
    rig.clock.now += 0.5
    answered(rig, "a", 2, ttft=1.0, tps=1e4, every_s=0.5)  # five times slower, twice: a change
    row = rig.router.rank(rig.config.models[0]).rows[-1]
    assert row.deployment.name == "a" and row.scored.prediction.drift
    assert rig.first().name == "b"
    rig.clock.now += 31  # no news of "a" since: it stays where its last answers put it
    answered(rig, "b", 1, ttft=0.4, tps=1e4)
    assert all(c.name == "b" for c in (rig.first() for _ in range(50)) if c.reason == "best-score")


def test_a_slow_streamer_never_shares_a_tie_for_a_long_answer() -> None:
    rig = Rig(routing_config([("streamer", 1, 1), ("snappy", 1, 1)]))
    # For 400 tokens: 0.2 + 400/100 = 4.2 s against 3.0 + 400/400 = 4.0 s, within the tie band.
    answered(rig, "snappy", 30, ttft=0.2, tps=100.0)
    answered(rig, "streamer", 30, ttft=3.0, tps=400.0)
    plans = [rig.router.plan(rig.request(max_tokens=400)).candidates[0] for _ in range(200)]
    long = Counter(c.name for c in plans if c.reason == "best-score")  # (exploration aside)
    assert set(long) == {"streamer"} and long["streamer"] > 180
    # A short answer's tie is about first tokens: spread, and the low latency one leads anyway.
    short = Counter(rig.router.plan(rig.request(max_tokens=4)).candidates[0].name for _ in range(50))
    assert short["snappy"] == 50


def test_a_replica_that_never_tried_a_deployment_ranks_it_from_the_shared_window() -> None:
    config = routing_config([("a", 1, 1), ("b", 1, 1)])
    rig = Rig(config)
    answered(rig, "a", 30, ttft=0.2)  # this replica's answers reach the shared store too
    answered(rig, "b", 30, ttft=0.6)
    other = MeasuredRouter(config, rig.store, rng=random.Random(3), clock=rig.clock)  # same window, no answers
    rows = other.rank(config.models[0]).rows
    assert [r.deployment.name for r in rows] == ["a", "b"]
    assert all(r.scored.prediction.source == "window" for r in rows)
    assert other.plan(rig.request()).candidates[0].reason == "best-score"  # known: nothing cold to probe


def test_attempts_overdue_in_flight_move_traffic_before_their_answers_come() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    answered(rig, "b", 20, ttft=0.4, tps=1e4)
    answered(rig, "a", 20, ttft=0.2, tps=1e4)
    started = []
    for _ in range(8):  # not streamed: no first token to wait for (``late_first_token`` judges those)
        plan = rig.router.plan(rig.request(stream=False))
        assert plan.candidates[0].name == "a" and plan.candidates[0].predicted_s is not None
        assert rig.router.attempt_started(plan.candidates[0])
        started.append(plan.candidates[0])
        rig.clock.now += 0.05
    assert rig.first().name == "a"  # they are not late yet
    rig.clock.now += 1.0  # five times their predicted time, and not one has answered
    row = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}["a"]
    assert row.scored.prediction.overdue > 3
    assert rig.first().name == "b"


def test_streams_waiting_for_a_late_first_token_move_traffic_before_they_are_overdue() -> None:
    """A first token 0.2 s → seconds, on answers whose streams take 2 s: their whole predicted time is no
    alarm for seconds more; the first tokens that do not come are one as soon as they are late."""
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"explore_share": 0.0}))
    answered(rig, "b", 20, ttft=0.6, tps=100.0)
    answered(rig, "a", 20, ttft=0.2, tps=100.0)
    in_flight = []  # held, as the relay holds each attempt's candidate: the router knows an attempt by it
    for _ in range(4):
        plan = rig.router.plan(rig.request(max_tokens=200))
        first = plan.candidates[0]
        assert first.name == "a" and first.predicted_first_token_s == pytest.approx(0.2, rel=0.3)
        assert rig.router.attempt_started(first)
        in_flight.append(first)
        rig.clock.now += 0.02
    assert rig.order(max_tokens=200)[0] == "a"  # not late yet
    rig.clock.now += 1.5  # several times their predicted first token, within their predicted time
    row = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}["a"]
    assert row.scored.prediction.overdue == 1.0 and row.scored.prediction.late_first_token > 5.0
    assert rig.order(max_tokens=200)[0] == "b"
    # A request that is not streamed predicts no first token for its attempt.
    assert rig.router.plan(rig.request(stream=False)).candidates[0].predicted_first_token_s is None


def probed_after_its_bucket_is_spent() -> Rig:
    """``a`` well measured, ``b`` measured slow on three answers, and the exploration bucket spent: ``b``'s next
    answer (a probe's) is judged on its own."""
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"explore_share": 0.05}))
    answered(rig, "b", 3, ttft=2.0, tps=50.0)
    answered(rig, "a", 20, ttft=0.5, tps=100.0)
    for _ in range(100):
        rig.router.plan(rig.request())  # spends the bucket
    return rig


def test_a_surprising_answer_from_an_explored_deployment_gets_a_second_look_at_once() -> None:
    rig = probed_after_its_bucket_is_spent()
    answered(rig, "b", 1, ttft=0.7, tps=100.0)  # b answered a probe: faster than it was (not by a leap)
    plan = rig.router.plan(rig.request())
    assert plan.candidates[0].name == "b" and plan.candidates[0].reason == "explore"


def test_a_leap_from_an_explored_deployment_wins_it_the_traffic_on_its_next_request() -> None:
    rig = probed_after_its_bucket_is_spent()
    answered(rig, "b", 1, ttft=0.3, tps=300.0)  # b answered a probe: several times faster in both
    plan = rig.router.plan(rig.request())
    assert plan.candidates[0].name == "b" and plan.candidates[0].reason == "best-score"


def test_a_leader_on_one_leap_is_raced_by_the_next_well_measured_deployment_until_confirmed() -> None:
    rig = probed_after_its_bucket_is_spent()
    answered(rig, "b", 1, ttft=0.3, tps=300.0)  # a leap: b leads on this one answer
    plan = rig.router.plan(rig.request())
    leader, challenger = plan.candidates[:2]
    # The leap keeps its traffic, but the well-measured one starts beside it at once, and if b loses the first
    # token it is drained (measured unseen) rather than cancelled.
    assert (leader.name, leader.reason, leader.on_trial, leader.hedge_after_s) == ("b", "best-score", True, 0.0)
    assert leader.drains and challenger.name == "a" and not challenger.drains
    assert isinstance(plan.ranking, Ranking) and plan.ranking.trial  # what the dashboard says of it
    answered(rig, "b", 5, ttft=0.3, tps=300.0)  # confirmed: no longer thin since its change
    plan = rig.router.plan(rig.request())
    assert plan.candidates[0].name == "b" and not plan.candidates[0].on_trial
    assert isinstance(plan.ranking, Ranking) and not plan.ranking.trial
    assert plan.candidates[0].hedge_after_s != 0.0


def test_a_leap_is_not_raced_by_a_slow_streamer_on_a_long_answer() -> None:
    """A low-latency slow streamer would win the first token and then stream 800 tokens at 40 tokens/s."""
    rig = Rig(routing_config([("snappy", 1, 1), ("bulk", 1, 1)], policy={"explore_share": 0.05}))
    answered(rig, "bulk", 3, ttft=3.0, tps=30.0)
    answered(rig, "snappy", 20, ttft=0.2, tps=40.0)
    for _ in range(100):
        rig.router.plan(rig.request(max_tokens=800))
    answered(rig, "bulk", 1, ttft=1.0, tps=400.0)  # a leap
    long = rig.router.plan(rig.request(max_tokens=800)).candidates[0]
    assert long.name == "bulk" and not long.on_trial
    assert not rig.router.plan(rig.request(stream=False, max_tokens=800)).candidates[0].on_trial


def test_a_provider_at_max_concurrency_is_refused_an_attempt_but_stays_in_the_plan() -> None:
    """A full provider is a moment's state: the attempt loop overflows past it (or waits), the plan keeps it."""
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], max_concurrency=1))
    judged(rig, "a", ttft=0.1)
    judged(rig, "b", ttft=1.0)
    a = rig.first()
    assert a.name == "a" and rig.router.attempt_started(a)
    assert rig.order() == ["a", "b"]
    assert rig.router.at_capacity(a) and not rig.router.attempt_started(a)
    ranking = rig.router.rank(rig.config.models[0])
    assert [(r.deployment.name, r.full, r.status) for r in ranking.rows] == [
        ("a", True, "at capacity"),
        ("b", False, "ready"),
    ]
    assert rig.router.in_flight("m", "a") == 1
    assert rig.router.provider_in_flight("a") == 1
    rig.router.attempt_finished(a, sample("a"))
    assert not rig.router.at_capacity(a)
    assert rig.order() == ["a", "b"]


def test_everything_full_is_planned_for_the_wait() -> None:
    rig = Rig(routing_config([("a", 1, 1)], max_concurrency=1))
    assert rig.router.attempt_started(rig.first())
    (candidate,) = rig.router.plan(rig.request()).candidates
    assert rig.router.at_capacity(candidate)


def test_near_equal_scores_go_to_fewer_in_flight() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    judged(rig, "a", ttft=0.50)
    judged(rig, "b", ttft=0.52)
    # Idle: near-equal scores share the traffic at random.
    spread = Counter(rig.first().name for _ in range(400))
    assert spread["a"] > 120 and spread["b"] > 120
    # Busy: the one with fewer requests in flight goes first.
    for _ in range(3):
        assert rig.router.attempt_started(rig.candidate("a"))
    assert all(rig.first().name == "b" for _ in range(50))


def test_clearly_better_scores_are_not_spread() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    judged(rig, "a", ttft=0.5)
    judged(rig, "b", ttft=1.0)
    for _ in range(3):
        assert rig.router.attempt_started(rig.candidate("a"))
    assert all(rig.first().name == "a" for _ in range(50))


def test_circuit_opens_cools_down_probes_and_closes() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 3, "cooldown_s": 10}))
    judged(rig, "a", ttft=0.1)
    judged(rig, "b", ttft=3.0)  # so much slower that a few failures of "a" do not change the order
    for _ in range(2):
        rig.finish("a", "upstream_error")
    assert rig.first().name == "a"  # two failures: still closed
    rig.finish("a", "timeout")
    assert rig.order() == ["b"]
    assert ("circuit", "m", "a", "open") in rig.events.events
    rig.clock.now += 10
    assert rig.order()[0] == "a"  # half-open: a real request is the probe
    assert ("circuit", "m", "a", "half_open") in rig.events.events
    probe = rig.candidate("a")
    assert rig.router.attempt_started(probe)
    assert not rig.router.attempt_started(probe)  # one probe at a time
    rig.router.attempt_finished(probe, sample("a"))
    assert ("circuit", "m", "a", "closed") in rig.events.events
    assert rig.router.attempt_started(probe)


def test_a_failed_probe_reopens_for_longer() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 1, "cooldown_s": 4}))
    judged(rig, "b")
    rig.finish("a", "upstream_error")
    rows = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}
    assert rows["a"].circuit == "open" and rows["a"].retry_in_s == pytest.approx(4)
    rig.clock.now += 4
    rig.finish("a", "broken_stream")  # the probe fails
    rows = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}
    assert rows["a"].retry_in_s == pytest.approx(8)


def test_retry_after_sets_the_cool_down() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 5}))
    judged(rig, "b")
    rig.finish("a", "upstream_error", retry_after_s=7.0)  # one 429 is enough when it says when to come back
    rows = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}
    assert rows["a"].circuit == "open" and rows["a"].retry_in_s == pytest.approx(7.0)


def test_a_429_without_retry_after_cools_down_at_once() -> None:
    """No hammering: a provider that said 429 is left alone for the policy's cool-down, doubling on repeats."""
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 5, "cooldown_s": 3}))
    judged(rig, "b")
    candidate = rig.candidate_any("a")
    for expected in (3.0, 6.0):
        assert rig.router.attempt_started(candidate)
        refused = dataclasses.replace(sample("a", outcome="upstream_error", started_at=rig.clock.now), status=429)
        rig.router.attempt_finished(candidate, refused)
        rows = {r.deployment.name: r for r in rig.router.rank(rig.config.models[0]).rows}
        assert rows["a"].circuit == "open" and rows["a"].rate_limited
        assert rows["a"].retry_in_s == pytest.approx(expected)
        rig.clock.now += expected  # half-open: the next attempt is the probe, refused again


def test_all_open_fails_fast_with_retry_after() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 1, "cooldown_s": 3}))
    rig.finish("a", "upstream_error")
    rig.clock.now += 1
    rig.finish("b", "upstream_error")
    with pytest.raises(NoCapacity) as caught:
        rig.first()
    assert caught.value.headers == {"retry-after": "2"}
    assert "a: circuit open, retry in 2.0s" in caught.value.message


def test_a_provider_back_from_an_outage_relearns_its_capacity_from_a_slow_start() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 3, "cooldown_s": 10}))
    judged(rig, "a", ttft=0.1)
    judged(rig, "b", ttft=3.0)
    limit = rig.router.state.capacity.of(rig.config.provider("a"), ("m", "a"))
    # The outage: every attempt refused with a 503 (an overload status), one at a time.
    for _ in range(3):
        refused = rig.candidate_any("a")
        assert rig.router.attempt_started(refused)
        rig.clock.now += 0.5
        failure = dataclasses.replace(sample("a", outcome="upstream_error", started_at=rig.clock.now), status=503)
        rig.router.attempt_finished(refused, failure)
    # Backed off to the floor, not to the one at a time it was refused at; its circuit open.
    assert limit.allowed == BACKOFF_FLOOR and rig.order() == ["b"]
    rig.clock.now += 10
    probe = rig.candidate_any("a")
    assert rig.router.attempt_started(probe)  # half-open
    rig.router.attempt_finished(probe, sample("a", started_at=rig.clock.now))
    assert ("circuit", "m", "a", "closed") in rig.events.events
    # Back: it grows by one an answer again, as at a cold start (after the outage's back-off, by 1 / limit, it took
    # ten answers to carry four requests at once, each request over it sent to the slower provider).
    running = [rig.candidate_any("a") for _ in range(int(BACKOFF_FLOOR))]
    assert all(rig.router.attempt_started(c) for c in running)
    assert not rig.router.attempt_started(rig.candidate_any("a"))  # at its limit: full
    rig.router.attempt_finished(running[0], sample("a", started_at=rig.clock.now))
    assert limit.allowed == BACKOFF_FLOOR + 1
    for candidate in running[1:]:
        rig.router.attempt_finished(candidate, sample("a", started_at=rig.clock.now))
    # A provider that refuses above some load still settles under it; a lone refusal never below the floor.
    third = rig.candidate_any("a")
    assert rig.router.attempt_started(third)
    rig.clock.now += 0.5
    rig.router.attempt_finished(third, dataclasses.replace(sample("a", outcome="upstream_error"), status=503))
    assert limit.allowed == BACKOFF_FLOOR


def test_client_faults_and_cancellations_never_open_a_circuit() -> None:
    rig = Rig(routing_config([("a", 1, 1)], policy={"failure_threshold": 1}))
    for _ in range(5):
        rig.finish("a", "client_error")
        rig.finish("a", "client_cancelled")
    assert rig.first().name == "a"
    assert not [e for e in rig.events.events if e[0] == "circuit"]


def test_a_streak_of_fast_failures_amid_successes_does_not_open() -> None:
    # A provider failing 30% of requests: under concurrency its instant 503s complete in streaks.
    rig = Rig(routing_config([("flaky", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 5}))
    for _ in range(3):
        for _ in range(4):
            rig.finish("flaky", "ok")
        rig.finish("flaky", "upstream_error")
    for _ in range(5):
        rig.finish("flaky", "upstream_error")
    assert "flaky" in rig.order()  # 8 of its last 20 attempts failed: a streak, but not a dead provider
    for _ in range(2):
        rig.finish("flaky", "upstream_error")
    assert "flaky" in rig.order()  # 10 of 20: not yet more than half
    rig.finish("flaky", "upstream_error")
    assert "flaky" not in rig.order()  # 11 of the last 20: mostly failing


def test_success_resets_the_consecutive_count() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 2}))
    for _ in range(5):
        rig.finish("a", "upstream_error")
        rig.finish("a", "ok")
    assert "a" in rig.order()


def test_fixed_order_ignores_scores_but_not_health() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)], policy={"extends": "fixed-order"}))
    judged(rig, "a", ttft=3.0)
    judged(rig, "c", ttft=0.1)
    assert rig.order() == ["a", "b", "c"]
    assert all(rig.first().reason == "best-score" for _ in range(100))  # never explores
    for _ in range(5):  # the default failure_threshold
        rig.finish("a", "upstream_error")
    assert rig.order() == ["b", "c"]


def test_constraint_breakers_go_last() -> None:
    rig = Rig(routing_config([("fast", 1, 1), ("slow", 1, 1)], policy={"max_ttft_s": 1.0, "min_samples": 3}))
    judged(rig, "fast", ttft=2.0, tps=1000.0)  # fastest overall, but over the TTFT ceiling
    judged(rig, "slow", ttft=0.5, tps=10.0)
    assert rig.order(max_tokens=1000) == ["slow", "fast"]
    rows = rig.router.rank(rig.config.models[0], max_tokens=1000).rows
    assert rows[1].status == "constraint"


def test_overrides_order_only_ignore() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)]))
    for name, ttft in (("a", 0.1), ("b", 0.2), ("c", 0.3)):
        judged(rig, name, ttft=ttft)
    plan = rig.router.plan(rig.request(preferences=ProviderPreferences(order=("c", "b"))))
    assert [c.name for c in plan.candidates] == ["c", "b", "a"]
    assert plan.candidates[0].reason == "override"
    assert rig.order(preferences=ProviderPreferences(order=("c",), allow_fallbacks=False)) == ["c"]
    assert rig.order(preferences=ProviderPreferences(allow_fallbacks=False)) == ["a"]
    assert rig.order(preferences=ProviderPreferences(only=("b", "c"))) == ["b", "c"]
    assert rig.order(preferences=ProviderPreferences(ignore=("a",))) == ["b", "c"]


def test_overrides_never_explore() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("new", 1, 1)], policy={"explore_share": 0.5}))
    judged(rig, "a")
    assert all(
        rig.router.plan(rig.request(preferences=ProviderPreferences(sort="price"))).candidates[0].name == "a"
        for _ in range(100)
    )


def test_max_price_excludes_dearer_deployments() -> None:
    rig = Rig(routing_config([("dear", 5, 10), ("cheap", 1, 2)]))
    judged(rig, "dear", ttft=0.1)
    judged(rig, "cheap", ttft=1.0)
    assert rig.order(preferences=ProviderPreferences(max_price_in=2.0)) == ["cheap"]
    assert rig.order(preferences=ProviderPreferences(max_price_out=10.0)) == ["dear", "cheap"]
    with pytest.raises(InvalidRequest) as caught:
        rig.order(preferences=ProviderPreferences(max_price_in=0.5))
    assert caught.value.param == "provider.max_price"
    assert "cheapest: cheap at 1/2 USD per 1M tokens" in caught.value.message


@pytest.mark.parametrize(
    ("preferences", "param"),
    [
        (ProviderPreferences(order=("nope",)), "provider.order"),
        (ProviderPreferences(only=("nope",)), "provider.only"),
        (ProviderPreferences(ignore=("a", "b")), "provider.ignore"),
    ],
)
def test_overrides_that_make_no_sense_are_400s(preferences: ProviderPreferences, param: str) -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    with pytest.raises(InvalidRequest) as caught:
        rig.order(preferences=preferences)
    assert caught.value.param == param


def test_hedge_thresholds_fixed_or_from_the_deployments_own_ttft() -> None:
    fixed = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"hedge_after_s": 0.75, "explore_share": 0}))
    fixed.feed(samples("a", 20, ttft=0.3) + samples("b", 20, ttft=0.3))  # measured, no probes: no races
    assert fixed.first().hedge_after_s == 0.75
    assert fixed.router.plan(fixed.request(stream=False)).candidates[0].hedge_after_s is None
    own = Rig(
        routing_config(
            [("a", 1, 1), ("b", 1, 1)], policy={"hedge_quantile": 0.9, "hedge_min_after_s": 0.2, "explore_race": False}
        )
    )
    assert own.first().hedge_after_s is None  # not judged yet: no threshold to trust
    own.feed(samples("a", 90, ttft=0.3) + samples("a", 10, ttft=4.0) + samples("b", 100, ttft=0.05))
    plan = own.router.plan(own.request())
    thresholds = {c.name: c.hedge_after_s for c in plan.candidates}
    assert thresholds["b"] == 0.2  # its own p90 (0.05 s) is under the floor
    assert thresholds["a"] == pytest.approx(0.3, rel=0.02)


def test_balanced_hedges_only_a_heavy_first_token_tail_and_never_onto_a_slow_stream() -> None:
    def threshold(a_ttfts: list[float], b_tps: float = 1e4, max_tokens: int = 16) -> float | None:
        rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))  # the balanced policy's defaults
        rig.feed([sample("a", ttft=t, tps=1e4, started_at=rig.clock.now) for t in a_ttfts])
        rig.feed(samples("b", 50, ttft=0.4, tps=b_tps, started_at=rig.clock.now))
        plan = rig.router.plan(rig.request(max_tokens=max_tokens))
        assert plan.candidates[0].name == "a"
        return plan.candidates[0].hedge_after_s

    light = [0.15 + 0.01 * (i % 10) for i in range(100)]  # 0.15 .. 0.24 s: a late answer is nearly done
    heavy = [0.2] * 95 + [3.0] * 5  # one in twenty waits 3 s
    assert threshold(light) is None
    assert threshold(heavy) == pytest.approx(0.2, rel=0.02)  # past the body: those still waiting are the tail
    # A backup that streams far slower would turn a late first token into a long slow answer.
    assert threshold(heavy, b_tps=40.0, max_tokens=800) is None


def test_hedge_budget_caps_hedges_as_a_share_of_requests() -> None:
    rig = Rig(
        routing_config(
            [("a", 1, 1), ("b", 1, 1)], policy={"hedge_after_s": 0.5, "hedge_budget": 0.1, "explore_share": 0}
        )
    )
    rig.feed(samples("a", 20, ttft=0.3) + samples("b", 20, ttft=0.3))  # measured, no probes: no races
    hedges = 0
    for _ in range(300):
        plan = rig.router.plan(rig.request())
        hedges += rig.router.try_hedge(plan)
    assert 29 <= hedges <= 32  # 10% of 300, plus the bucket's small burst


def test_a_price_led_plan_lists_every_deployment_once() -> None:
    # Price leads, so a deployment with nothing measured ranks among measured ones by its price:
    # spreading the near-equal leaders must not drop it nor list another twice.
    rig = Rig(routing_config([("a", 1.0, 1.0), ("b", 1.02, 1.02), ("c", 1.04, 1.04)], policy={"extends": "cheapest"}))
    judged(rig, "a", ttft=0.5)
    judged(rig, "c", ttft=0.5)
    for _ in range(50):
        assert sorted(rig.order()) == ["a", "b", "c"]


def test_unstreamed_traffic_explores_only_what_it_can_measure() -> None:
    """Whole answers show no stream speed: after each deployment's first answer, they follow the score."""
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    reasons = []
    for _ in range(30):
        first = rig.first(stream=False)
        reasons.append(first.reason)
        assert rig.router.attempt_started(first)
        whole = dataclasses.replace(
            sample(first.name, ttft=None, tps=None, e2e=0.4, started_at=rig.clock.now), stream=False
        )
        rig.store.record(whole)
        rig.router.attempt_finished(first, whole)
        rig.clock.now += 0.1
    assert reasons[:2] == ["explore", "explore"]  # the cold start: one answer from each
    assert reasons.count("explore") <= 2 + 30 * 0.05 + 2  # then the budget (its burst included), not every request
