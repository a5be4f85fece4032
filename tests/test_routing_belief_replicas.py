"""Replicas' beliefs hear every replica's answers, each once (``gateway.routing.belief_others``).

Two belief routers over one in-memory store, each recording under its own replica id (``as_replica``), as two
processes over one Redis would: what one hears directly, the other hears from the store's log at its next plan,
as one answer at the time it ended, and never twice; its own answers, heard as they ended, it skips in the log.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest

from gateway.config import GatewayConfig
from gateway.routing import ProviderPreferences, RouteRequest
from gateway.routing.belief_others import OthersAnswers
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore, StatsSnapshot
from gateway.stats.answers import Answer, AnswerLog, Recorder
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.samples import make_sample

WALL = 1_800_000_000.0
"""The stores' wall clock stands this far ahead of the routers' monotonic one."""


class Replica:
    """One replica: its router and the store it records to (the window and the log shared with the others)."""

    def __init__(self, config: GatewayConfig, store: InMemoryStatsStore, clock: FakeClock, seed: int) -> None:
        self.config = config
        self.store = store
        self.router = BeliefRouter(config, store, rng=random.Random(seed), clock=clock)
        model = config.models[0]
        self.candidates = {
            d.name: Candidate(d, config.provider(d.provider), model=model.name) for d in model.deployments
        }

    def answer(self, deployment: str, sample: Sample) -> None:
        """One attempt there, answered as the relay reports it: to the store, then to the router."""
        candidate = self.candidates[deployment]
        assert self.router.attempt_started(candidate)
        self.store.record(sample)
        self.router.attempt_finished(candidate, sample)

    def plan(self) -> None:
        request = RouteRequest(self.config.models[0], "chat", True, 20, 100, ProviderPreferences())
        self.router.plan(request)

    def answers(self, deployment: str) -> int:
        return self.router.belief("m", deployment).answers


def replicas(count: int = 2) -> tuple[FakeClock, list[Replica]]:
    config = gateway_config(["a", "b"], policy={"extends": "balanced"})
    clock = FakeClock()
    store = InMemoryStatsStore(config.stats, lambda: WALL + clock(), replica="replica-0")
    stores = [store, *(store.as_replica(f"replica-{i}") for i in range(1, count))]
    return clock, [Replica(config, s, clock, seed) for seed, s in enumerate(stores)]


def test_another_replicas_answer_is_heard_once_as_its_own_replica_heard_it() -> None:
    clock, (one, two) = replicas()
    clock.advance(0.5)
    one.answer("a", make_sample(deployment="a", ttft_s=0.3, tokens_per_s=200.0))
    heard_at = clock()
    assert (one.answers("a"), two.answers("a")) == (1, 0)
    clock.advance(2.0)
    two.plan()
    # The same evidence at the same time from the same prior: the same belief, though heard 2 s later.
    assert two.router.belief("m", "a") == one.router.belief("m", "a")
    assert two.router.belief("m", "a").heard_at == heard_at
    two.plan()
    one.plan()
    assert (one.answers("a"), two.answers("a")) == (1, 1)  # neither hears it again; the one that had it, not twice


def test_each_replica_hears_the_others_in_order_and_skips_its_own() -> None:
    clock, (one, two, three) = replicas(3)
    for replica, deployment in ((two, "b"), (one, "a"), (two, "b"), (three, "a")):
        clock.advance(0.25)
        replica.answer(deployment, make_sample(deployment=deployment, ttft_s=0.4, tokens_per_s=100.0))
    clock.advance(1.0)
    for replica in (one, two, three):
        replica.plan()
    assert [(r.answers("a"), r.answers("b")) for r in (one, two, three)] == [(2, 2), (2, 2), (2, 2)]
    # Who recorded what, in order, each once: the log's tags and numbers.
    log = one.store.snapshot().answers
    assert [(x.replica, x.seq) for x in log.of(("m", "b"))] == [("replica-1", 1), ("replica-1", 2)]
    assert [(x.replica, x.seq) for x in log.of(("m", "a"))] == [("replica-0", 1), ("replica-2", 1)]
    one.answer("a", make_sample(deployment="a", ttft_s=0.4, tokens_per_s=100.0))
    for replica in (one, two, three):
        replica.plan()
    assert [r.answers("a") for r in (one, two, three)] == [3, 3, 3]


def test_a_failure_and_a_lost_race_are_heard_as_their_replica_heard_them() -> None:
    clock, (one, two) = replicas()
    clock.advance(0.5)
    one.answer("a", make_sample(deployment="a", outcome="timeout", ttft_s=None, tokens_per_s=None))
    clock.advance(0.5)
    lost = make_sample(deployment="b", outcome="client_cancelled", ttft_s=2.0, tokens_per_s=None, output_tokens=None)
    one.answer("b", dataclasses.replace(lost, hedged=True))  # a raced loser: its first token is at least 2 s
    clock.advance(1.0)
    two.plan()
    now = clock()
    for deployment in ("a", "b"):
        assert two.router.belief("m", deployment).failure(now) == one.router.belief("m", deployment).failure(now)
    assert two.answers("b") == one.answers("b") == 1  # the bound, once
    assert two.router.belief("m", "b").expected(now).ttft_s == one.router.belief("m", "b").expected(now).ttft_s


def test_a_replica_that_starts_late_hears_the_log_at_its_first_plan() -> None:
    """What replaces the window as a cold start's prior: the log's last answers, each as an answer."""
    clock, (one,) = replicas(1)
    for _ in range(5):
        clock.advance(0.3)
        one.answer("a", make_sample(deployment="a", ttft_s=0.3, tokens_per_s=200.0))
    late = Replica(one.config, one.store.as_replica("late"), clock, 9)
    clock.advance(1.0)
    late.plan()
    assert late.answers("a") == 5
    # The same five answers at the same times (to the rounding of the wall clock's offset): the same belief.
    mine, heard = one.router.belief("m", "a"), late.router.belief("m", "a")
    assert heard.heard_at == pytest.approx(mine.heard_at, abs=1e-6)
    now = clock()
    expected, told = mine.expected(now), heard.expected(now)
    assert (told.ttft_s, told.s_per_token, *told.spread) == pytest.approx(
        (expected.ttft_s, expected.s_per_token, *expected.spread), rel=1e-6
    )


class _CountedLog(AnswerLog):
    """An ``AnswerLog`` counting the reads through ``since``."""

    sinces = 0

    def since(self, pair: tuple[str, str], mark: tuple[int, int]) -> tuple[Sequence[Answer], bool]:
        self.sinces += 1
        return super().since(pair, mark)


@pytest.mark.parametrize("adds", [0.7, 0.45], ids=["reads-between-bursts", "reads-after-most-adds"])
def test_reading_only_what_was_added_finds_what_reading_the_whole_log_finds(adds: float) -> None:
    """``OthersAnswers`` reads only the answers added since its last read unless the log was replaced (a Redis
    refresh): the same answers, in the same order, as reading the whole log each time and skipping those heard.
    Read after most adds, the one answer added (the log's last, read in place) is most of what it reads."""
    rng = random.Random(40)
    log = _CountedLog()
    snapshot = StatsSnapshot({}, 0.0, log, "me")
    recorders = {name: Recorder(name) for name in ("me", "r1", "r2")}
    pairs = [("m", "a"), ("m", "b")]
    others, reference = OthersAnswers(), dict[tuple[tuple[str, str], str], int]()
    heard = ones = reads = 0
    read = [(0, 0)] * len(pairs)
    for step in range(3000):
        pair = rng.choice(pairs)
        roll = rng.random()
        if roll < adds:
            answer = recorders[rng.choice(list(recorders))].answer(make_sample(deployment=pair[1]), float(step))
            assert answer is not None
            log.add(pair, answer)
        elif roll < adds + 0.1:
            log.replace(pair, list(log.of(pair))[rng.randrange(4) :])  # read back, its oldest trimmed
        else:
            expected = []
            for p in pairs:
                for answer in log.of(p):
                    key = (p, answer.replica)
                    if answer.replica != "me" and answer.seq > reference.get(key, 0):
                        expected.append((p, answer))
                        reference[key] = answer.seq
            marks = [log.mark(p) for p in pairs]
            reads += sum(m != r for m, r in zip(marks, read, strict=True))
            found = others.new(snapshot, pairs)
            assert found == expected, step
            heard += len(found)
            ones += sum(m[0] == r[0] and m[1] == r[1] + 1 for m, r in zip(marks, read, strict=True))
            read = marks
    assert heard > 500
    assert ones > 100
    assert log.sinces == reads - ones  # the one answer added is read in place, not through ``since``


def test_a_models_answers_are_read_for_its_deployments_as_configured_now() -> None:
    """``new_of`` reads what ``new`` reads for the model's deployments, in order; a model configured again (a
    reload: another object of the same name) is read for its new deployments."""
    log = AnswerLog()
    snapshot = StatsSnapshot({}, 0.0, log, "me")
    other = Recorder("r1")
    config = gateway_config(["a", "b", "c"])
    model = config.models[0]
    for step, name in enumerate(["a", "c", "b", "c"]):
        answer = other.answer(make_sample(deployment=name), float(step))
        assert answer is not None
        log.add((model.name, name), answer)
    found = OthersAnswers().new_of(snapshot, model)
    assert found == OthersAnswers().new(snapshot, [(model.name, d.name) for d in model.deployments])
    assert [key[1] for key, _ in found] == ["a", "b", "c", "c"]
    others = OthersAnswers()
    fewer = dataclasses.replace(model, deployments=model.deployments[2:])
    assert [key[1] for key, _ in others.new_of(snapshot, fewer)] == ["c", "c"]
    assert [key[1] for key, _ in others.new_of(snapshot, model)] == ["a", "b"]
