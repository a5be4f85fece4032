"""The measured router on a real in-memory stats store, with seeded randomness and an injected clock."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Any

import pytest

from gateway.config import GatewayConfig, StatsConfig
from gateway.errors import InvalidRequest, NoCapacity
from gateway.events import EventLog
from gateway.routing import MeasuredRouter, ProviderPreferences, RouteRequest
from gateway.routing.plan import Candidate
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore
from tests.support.clock import FakeClock
from tests.support.config import routing_config
from tests.support.samples import sample, samples


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

    def first(self) -> Candidate:
        return self.router.plan(self.request()).candidates[0]

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


def test_a_never_judged_deployment_is_explored_until_judged() -> None:
    rig = Rig(routing_config([("known", 1, 1), ("new", 1, 1)], policy={"min_samples": 3}))
    judged(rig, "known", ttft=0.5)
    for _ in range(3):
        first = rig.first()
        assert (first.name, first.reason) == ("new", "explore")
        assert rig.router.attempt_started(first)
        assert rig.first().name == "known"  # one probe at a time until answers come back
        result = sample("new", ttft=1.6, started_at=rig.clock.now)
        rig.store.record(result)
        rig.router.attempt_finished(first, result)
    assert all(rig.first().name == "known" for _ in range(20))  # judged: slower, so not chosen


def test_exploration_share_is_bounded() -> None:
    rig = Rig(routing_config([("known", 1, 1), ("new", 1, 1)], policy={"explore_share": 0.05}))
    judged(rig, "new")
    rig.first()  # both judged once: the cold start is over
    rig.clock.now += 61  # "new"'s samples age out of the window
    judged(rig, "known")
    reasons = Counter((c.name, c.reason) for c in (rig.first() for _ in range(4000)))
    assert set(reasons) == {("known", "best-score"), ("new", "explore")}
    assert 0.035 < reasons["new", "explore"] / 4000 < 0.065


def test_a_close_runner_up_with_little_evidence_keeps_a_share() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("far", 1, 1)], policy={"explore_share": 0.1}))
    judged(rig, "a", n=40, ttft=0.5, tps=1e4)
    judged(rig, "b", n=6, ttft=0.7, tps=1e4)  # a little slower, on thin evidence
    judged(rig, "far", n=6, ttft=5.0, tps=1e4)  # clearly worse: left alone until its samples age out
    firsts = Counter((c.name, c.reason) for c in (rig.first() for _ in range(2000)))
    assert set(firsts) == {("a", "best-score"), ("b", "explore")}
    assert 0.07 < firsts["b", "explore"] / 2000 < 0.13
    judged(rig, "b", n=20, ttft=0.7, tps=1e4)  # 26 attempts: enough evidence, no more revisits
    assert all(rig.first().name == "a" for _ in range(200))


def test_a_burst_at_cold_start_probes_each_deployment_once_then_waits() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)], policy={"min_samples": 2}))
    probes = []
    for _ in range(3):
        first = rig.first()
        assert first.reason == "explore"
        assert rig.router.attempt_started(first)
        probes.append(first)
    assert sorted(p.name for p in probes) == ["a", "b", "c"]
    # Each has an attempt out and no answer yet: the next request follows the ranking.
    assert rig.first().reason == "best-score"
    for probe in probes:
        result = sample(probe.name, started_at=rig.clock.now)
        rig.store.record(result)
        rig.router.attempt_finished(probe, result)
    assert rig.first().reason == "explore"  # answers are back: measuring goes on


def test_a_hopeless_deployment_is_dismissed_before_min_samples() -> None:
    rig = Rig(routing_config([("good", 1, 1), ("hopeless", 1, 1)], policy={"min_samples": 5}))
    judged(rig, "good", ttft=0.2, tps=1e4)
    rig.feed(samples("hopeless", 2, ttft=2.0, tps=1e4))  # even its fastest answer is 10x slower
    assert all(rig.first().name == "good" for _ in range(100))
    assert ("m", "hopeless") in rig.router.state.judged_once


def test_a_deployment_whose_samples_aged_out_is_explored_again() -> None:
    rig = Rig(routing_config([("known", 1, 1), ("old", 1, 1)], policy={"explore_share": 0.2}))
    judged(rig, "known")
    judged(rig, "old", ttft=5.0)
    assert all(rig.first().reason == "best-score" for _ in range(200))
    rig.clock.now += 61  # "old"'s samples leave the 60 s window; "known" is measured again
    judged(rig, "known")
    firsts = Counter((c.name, c.reason) for c in (rig.first() for _ in range(500)))
    assert firsts["old", "explore"] > 50
    assert rig.router.rank(rig.config.models[0]).rows[1].status == "exploring"


def test_a_slowdown_shows_in_the_last_answers_before_the_window_moves() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)]))
    judged(rig, "a", n=200, ttft=0.2, tps=1e4)  # a long, fast history in the window
    judged(rig, "b", n=200, ttft=0.4, tps=1e4)
    for _ in range(3):
        assert rig.first().name == "a"
        slow = sample("a", ttft=1.0, tps=1e4, started_at=rig.clock.now)
        rig.store.record(slow)
        candidate = rig.candidate("a")
        assert rig.router.attempt_started(candidate)
        rig.router.attempt_finished(candidate, slow)
    # Three slow answers against 200 fast ones: the window's mean barely moved, the last answers did.
    row = rig.router.rank(rig.config.models[0]).rows[-1]
    assert row.deployment.name == "a" and row.scored.prediction.drift
    assert rig.first().name == "b"
    rig.clock.now += 31  # the last answers are too old to trust: back to the window
    assert rig.first().name == "a"


def test_provider_at_max_concurrency_is_skipped() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], max_concurrency=1))
    judged(rig, "a", ttft=0.1)
    judged(rig, "b", ttft=1.0)
    a = rig.first()
    assert a.name == "a" and rig.router.attempt_started(a)
    assert rig.order() == ["b"]
    assert not rig.router.attempt_started(a)
    assert rig.router.in_flight("m", "a") == 1
    assert rig.router.provider_in_flight("a") == 1
    rig.router.attempt_finished(a, sample("a"))
    assert rig.order() == ["a", "b"]


def test_everything_full_is_a_503() -> None:
    rig = Rig(routing_config([("a", 1, 1)], max_concurrency=1))
    assert rig.router.attempt_started(rig.first())
    with pytest.raises(NoCapacity, match="provider at max_concurrency"):
        rig.first()


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
    judged(rig, "b", ttft=1.0)
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
    fixed = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"hedge_after_s": 0.75}))
    assert fixed.first().hedge_after_s == 0.75
    assert fixed.router.plan(fixed.request(stream=False)).candidates[0].hedge_after_s is None
    own = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"hedge_quantile": 0.9, "hedge_min_after_s": 0.2}))
    assert own.first().hedge_after_s is None  # not judged yet: no threshold to trust
    own.feed(samples("a", 90, ttft=0.3) + samples("a", 10, ttft=4.0) + samples("b", 100, ttft=0.05))
    plan = own.router.plan(own.request())
    thresholds = {c.name: c.hedge_after_s for c in plan.candidates}
    assert thresholds["b"] == 0.2  # its own p90 (0.05 s) is under the floor
    assert thresholds["a"] == pytest.approx(0.3, rel=0.02)


def test_hedge_budget_caps_hedges_as_a_share_of_requests() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"hedge_after_s": 0.5, "hedge_budget": 0.1}))
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
