"""The sinks' shortcuts keep what the former code kept, exactly (issue 41, the *sinks* stage).

Each shortcut is run beside the former code, copied here, over random sequences of samples; every state a reader
can see is compared: the stats window's total and slices, the minute history, the answer log and its marks; the
spend settlement's bookings, store and counter; the access line's overhead.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from gateway.accesslog import AccessRecord
from gateway.admission.spending import Budget, InMemorySpendStore, Spender, SpendLedger
from gateway.admission.spending.metrics import SpendMetrics
from gateway.admission.spending.store import Booking, HeldScope, Hold
from gateway.admission.spending.windows import period_of, to_usd
from gateway.config import StatsConfig
from gateway.metrics.plain import PlainCounter
from gateway.samples import OUTCOMES, REQUEST_KINDS, VALIDITIES, Sample
from gateway.stats.answers import Answer, answer_of, tells
from gateway.stats.memory import InMemoryStatsStore
from gateway.stats.sketch import LogHistogram
from gateway.stats.snapshot import DeploymentSummary, sample_buckets, validity_key
from gateway.stats.window import _validity_key


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.25 else value


def _random_sample(rng: random.Random) -> Sample:
    """A sample of a few models and deployments, any outcome, each measure sometimes missing (and sometimes zero,
    tiny or NaN: the zero bucket), a judged answer or not."""
    model = rng.choice(("m1", "m2"))
    kind = rng.choice((None, *REQUEST_KINDS))
    return Sample(
        model=model,
        deployment=rng.choice(("d1", "d2", "d3")),
        provider=rng.choice(("p1", "p2")),
        endpoint=rng.choice(("chat", "responses")),
        stream=rng.random() < 0.5,
        outcome=rng.choice(OUTCOMES),
        started_at=rng.uniform(0, 1e9),
        status=_maybe(rng, rng.choice((200, 429, 500))),
        ttft_s=_maybe(rng, rng.choice((0.0, 1e-7, float("nan"), rng.uniform(0.01, 5)))),
        first_answer_s=_maybe(rng, rng.uniform(0.01, 5)),
        tokens_per_s=_maybe(rng, rng.uniform(1, 500)),
        e2e_s=_maybe(rng, rng.uniform(0.1, 60)),
        output_tokens=_maybe(rng, rng.randrange(0, 4000)),
        usage_prompt_tokens=_maybe(rng, rng.randrange(0, 5000)),
        usage_completion_tokens=_maybe(rng, rng.randrange(0, 4000)),
        usage_cached_tokens=_maybe(rng, rng.randrange(0, 5000)),
        prompt_tokens_estimate=_maybe(rng, rng.randrange(0, 5000)),
        cost_usd=_maybe(rng, rng.uniform(0, 0.1)),
        hedged=rng.random() < 0.3,
        attempt_s=_maybe(rng, rng.uniform(0.01, 60)),
        kind=kind,
        validity=None if kind is None else _maybe(rng, rng.choice(VALIDITIES)),
    )


def _former_record(store: InMemoryStatsStore, seq: list[int], sample: Sample) -> None:
    """``InMemoryStatsStore.record`` before the shortcuts: the window and minutes find their own key, the answer
    through ``tells`` and ``answer_of``."""
    buckets = sample_buckets(sample)
    now = store.wall_clock()
    store.window.add(sample, buckets)
    store.minutes.add(sample, now, buckets)
    if tells(sample):
        seq[0] += 1
        store.answers.add((sample.model, sample.deployment), answer_of(sample, store.replica, seq[0], now))


def _histogram(h: LogHistogram) -> tuple[Any, ...]:
    return (sorted(h.counts.items()), h.count, h._sum)


def _summary(s: DeploymentSummary) -> tuple[Any, ...]:
    histograms = {metric: _histogram(h) for metric, h in s.histograms.items()}
    return (s.model, s.deployment, dict(s.outcomes), dict(s.validity), histograms, list(s.histograms))


def _state(store: InMemoryStatsStore) -> tuple[Any, ...]:
    window = store.window
    total = {key: _summary(s) for key, s in window.total.items()}
    slices = {i: {key: _summary(s) for key, s in part.items()} for i, part in window.slices.items()}
    minutes = {pair: {m: _summary(s) for m, s in kept.items()} for pair, kept in store.minutes.minutes.items()}
    answers = {pair: [tuple(a) for a in kept] for pair, kept in store.answers.recent.items()}
    return total, list(total), slices, minutes, answers, dict(store.answers.marks)


def test_the_store_records_what_the_former_record_recorded() -> None:
    """40 random sequences of 400 samples, the clock moving by random steps (slices closing, minutes turning,
    slices leaving the window): after every few samples and at the end, every state a reader sees is the same,
    and so are the snapshot's quantiles and the answers' reprs (their types: ``Answer``s, the same field order)."""
    for seed in range(40):
        rng = random.Random(seed)
        clock_a, clock_b = _Clock(), _Clock()
        config = StatsConfig(window_s=60, slice_s=10)
        new = InMemoryStatsStore(config, clock_a, replica="r")
        old = InMemoryStatsStore(config, clock_b, replica="r")
        seq = [0]
        for n in range(400):
            step = rng.choice((0.0, 0.0, 0.5, 3.0, 11.0, 70.0))
            clock_a.now += step
            clock_b.now += step
            sample = _random_sample(rng)
            new.record(sample)
            _former_record(old, seq, sample)
            if n % 37 == 0 or n == 399:
                assert _state(new) == _state(old), (seed, n)
                a, b = new.snapshot(), old.snapshot()
                for key, summary in b.summaries.items():
                    mine = a.get(*key)
                    assert mine is not None
                    for metric in summary.histograms:
                        for q in (0.05, 0.5, 0.95):
                            assert mine.quantile(metric, q) == summary.quantile(metric, q)
        assert all(type(x) is Answer for kept in new.answers.recent.values() for x in kept)
        assert [repr(x) for k in new.answers.recent.values() for x in k] == [
            repr(x) for k in old.answers.recent.values() for x in k
        ]


def test_an_answer_is_made_only_of_a_sample_that_tells() -> None:
    """``Recorder.answer`` numbers only what it keeps, as ``tells`` then ``answer_of`` did: 20,000 random samples."""
    rng = random.Random(7)
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=10), _Clock(), replica="x")
    seq = 0
    for _ in range(20_000):
        sample = _random_sample(rng)
        answer = store.recorder.answer(sample, 5.0)
        if tells(sample):
            seq += 1
            assert answer == answer_of(sample, "x", seq, 5.0)
            assert answer is not None and type(answer) is Answer
        else:
            assert answer is None


def test_the_kept_validity_keys_are_validity_key() -> None:
    """The window's kept ``kind:verdict`` strings equal ``validity_key``'s, for every kind and verdict, twice (made,
    then found)."""
    for _ in range(2):
        for kind in REQUEST_KINDS:
            for verdict in VALIDITIES:
                sample = Sample(model="m", deployment="d", provider="p", endpoint="chat", stream=True, outcome="ok",
                                started_at=0.0, kind=kind, validity=verdict)  # fmt: skip
                assert _validity_key(kind, verdict) == validity_key(sample)


class _Heard:
    """A spend listener that keeps every booking it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, list[Booking]]] = []

    def booked(self, key: str, team: str, bookings: Sequence[Booking]) -> None:
        self.heard.append((key, team, list(bookings)))

    def refused(self, scope: str, name: str) -> None:
        pass


class _FormerSpendMetrics(SpendMetrics):
    """``SpendMetrics.booked`` as it was: each booking's cost through ``to_usd``."""

    def booked(self, key: str, team: str, bookings: Sequence[Booking]) -> None:
        if not self.named:
            key = team = ""
        children = self._spend_children
        for booking in bookings:
            labels = (key, team, booking.model, booking.provider)
            child = children.get(labels)
            if child is None:
                child = children[labels] = self.spend.labels(*labels)
            child.inc(to_usd(booking.cost))


def _exposition(registry: CollectorRegistry) -> str:
    return "\n".join(line for line in generate_latest(registry).decode().splitlines() if "_created" not in line)


def test_the_ledger_settles_now_what_the_former_settlement_settled() -> None:
    """``SpendLedger.settle_now`` (bookings made in its own loop, the store's ``queue`` booking itself, the counter
    fed ``cost / NANOS_PER_USD``) against the former: ``settle``'s ``bookings_of``, then the store's ``settle_now``,
    and ``booked`` through ``to_usd`` (copied above). 600 random settlements (a hold or none, 0-3 samples, costs
    None, 0 or any, two spenders, named metrics or not, the clock across days and months): the bookings heard, the
    store's counters, holds and rows, and the spend counter's exposition are the same."""
    rng = random.Random(11)
    spenders = [
        Spender.of("k1", "alice", "t", Budget(10.0, "day"), Budget(50.0, "month")),
        Spender.of("k2", "bob", None, None, None),
    ]
    sides = []
    for kind in (SpendMetrics, _FormerSpendMetrics):
        ledger = SpendLedger(InMemorySpendStore(), wall_clock=_Clock())
        registry = CollectorRegistry()
        metrics = kind(registry, PlainCounter)
        heard = _Heard()
        ledger.listeners += [metrics, heard]
        sides.append((ledger, registry, metrics, heard))
    at = 1_798_000_000.0
    for i in range(600):
        at += rng.choice([1.0, 600.0, 3600.0 * 7, 86400.0 * 12])
        spender = rng.choice(spenders)
        named = rng.random() < 0.7
        samples = [
            Sample(
                model=rng.choice(("m1", "m2")),
                deployment=rng.choice(("a", "b")),
                provider=rng.choice(("p", "q")),
                endpoint="chat",
                stream=True,
                outcome="ok",
                started_at=0.0,
                cost_usd=rng.choice((None, 0.0, rng.uniform(0, 0.01))),
            )  # fmt: skip
            for _ in range(rng.randrange(4))
        ]
        held = tuple(HeldScope(scope, period_of(scope.budget.window, at)) for scope in spender.scopes)
        hold = Hold(f"h{i}", 1000, held, spender.tag, at + 60) if held and rng.random() < 0.5 else None
        for ledger, _, metrics, _ in sides:
            ledger.wall_clock.now = at  # type: ignore[attr-defined]
            metrics.named = named
            if hold is not None:
                asyncio.run(ledger.store.reserve(hold, at))
        sides[0][0].settle_now(spender, hold, samples)
        asyncio.run(sides[1][0].settle(spender, hold, samples))  # the former path: bookings_of, store.settle
    (new, new_registry, _, new_heard), (old, old_registry, _, old_heard) = sides
    assert new_heard.heard == old_heard.heard and len(new_heard.heard) > 300
    for attribute in ("_counters", "_holds", "_rows"):
        assert getattr(new.store, attribute) == getattr(old.store, attribute)
    assert _exposition(new_registry) == _exposition(old_registry)


def _former_overhead_s(record: AccessRecord) -> float | None:
    """``AccessRecord.overhead_s`` as it was: through the ``first_byte_at`` property."""
    if record.request is None:
        return None
    first_byte_at = record.first_byte_at
    if first_byte_at is None:
        return None
    trace = record.request.trace
    if trace.upstream_sent_at is None or trace.upstream_ready_at is None:
        return None
    before = trace.upstream_sent_at - record.received_at - trace.queue_wait_before_sent_s
    return before + (first_byte_at - trace.upstream_ready_at)


def test_the_overhead_is_what_the_former_overhead_was() -> None:
    """``overhead_s`` with ``first_byte_at`` inline against the former, on 20,000 random records: no request, no
    reply log, an error the gateway answered itself, no first byte, no upstream times, and every one set."""
    rng = random.Random(3)

    def maybe(value: float) -> float | None:
        return None if rng.random() < 0.2 else value

    for _ in range(20_000):
        record = AccessRecord("r", "chat", rng.uniform(0, 10), time.perf_counter)
        if rng.random() < 0.85:
            trace = SimpleNamespace(
                upstream_sent_at=maybe(rng.uniform(0, 20)),
                upstream_ready_at=maybe(rng.uniform(0, 20)),
                queue_wait_before_sent_s=rng.uniform(0, 1),
            )
            record.request = SimpleNamespace(trace=trace)  # type: ignore[assignment]
        if rng.random() < 0.85:
            record.log = SimpleNamespace(first_byte_at=maybe(rng.uniform(0, 20)))  # type: ignore[assignment]
        if rng.random() < 0.2:
            record.error_status = rng.choice((400, 502))
        assert record.overhead_s() == _former_overhead_s(record)
