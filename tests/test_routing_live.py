"""The measured router on a real in-memory stats store, with seeded randomness and an injected clock."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from gateway.config import GatewayConfig, StatsConfig
from gateway.errors import InvalidRequest
from gateway.events import EventLog
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_live import LiveBeliefRouter
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
        self.other = self.store.as_replica("other")
        self.events = EventLog()
        self.router = LiveBeliefRouter(
            config, self.store, rng=random.Random(seed), clock=self.clock, events=self.events
        )

    def feed(self, batch: list[Sample]) -> None:
        """Answers another replica recorded (in the shared window and log this replica reads)."""
        for s in batch:
            self.other.record(s)

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
    """``n`` answers from ``name`` heard by another replica: the beliefs learn them, this replica's health does not."""
    rig.feed(samples(name, n, ttft=ttft, tps=tps, started_at=rig.clock.now))


def answered(rig: Rig, name: str, n: int = 1, ttft: float = 0.5, tps: float = 100.0, every_s: float = 0.0) -> None:
    """``n`` answers from ``name`` as the relay reports them: to the router (its fast view) and to the store."""
    for _ in range(n):
        candidate = rig.candidate_any(name)
        assert rig.router.attempt_started(candidate)
        result = sample(name, ttft=ttft, tps=tps, started_at=rig.clock.now)
        rig.store.record(result)
        rig.router.attempt_finished(candidate, result)
        rig.clock.now += every_s


def test_everything_full_is_planned_for_the_wait() -> None:
    rig = Rig(routing_config([("a", 1, 1)], max_concurrency=1))
    assert rig.router.attempt_started(rig.first())
    (candidate,) = rig.router.plan(rig.request()).candidates
    assert rig.router.at_capacity(candidate)


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


def test_client_faults_and_cancellations_never_open_a_circuit() -> None:
    rig = Rig(routing_config([("a", 1, 1)], policy={"failure_threshold": 1}))
    for _ in range(5):
        rig.finish("a", "client_error")
        rig.finish("a", "client_cancelled")
    assert rig.first().name == "a"
    assert not [e for e in rig.events.events if e[0] == "circuit"]


def test_success_resets_the_consecutive_count() -> None:
    rig = Rig(routing_config([("a", 1, 1), ("b", 1, 1)], policy={"failure_threshold": 2}))
    for _ in range(5):
        rig.finish("a", "upstream_error")
        rig.finish("a", "ok")
    assert "a" in rig.order()


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


def test_a_price_led_plan_lists_every_deployment_once() -> None:
    # Price leads, so a deployment with nothing measured ranks among measured ones by its price:
    # spreading the near-equal leaders must not drop it nor list another twice.
    rig = Rig(routing_config([("a", 1.0, 1.0), ("b", 1.02, 1.02), ("c", 1.04, 1.04)], policy={"extends": "cheapest"}))
    judged(rig, "a", ttft=0.5)
    judged(rig, "c", ttft=0.5)
    for _ in range(50):
        assert sorted(rig.order()) == ["a", "b", "c"]
