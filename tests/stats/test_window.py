"""The sliced window with an injected clock: samples count in the slice of their arrival, leave
the window whole slices at a time, and the incremental total always equals the slices' sum."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import StatsConfig
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore
from gateway.stats.history import HISTORY_METRICS, MinuteBuckets
from gateway.stats.sketch import LogHistogram, bucket_of
from gateway.stats.snapshot import DeploymentSummary, sample_buckets, sample_values, validity_key
from gateway.stats.window import SlicedWindow, subtract
from tests.support.clock import FakeClock
from tests.support.samples import make_sample


def test_samples_leave_the_window_slice_by_slice(clock: FakeClock) -> None:
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=10), clock)
    clock.now = 1_800_000_000.0  # the start of a slice
    store.record(make_sample(ttft_s=0.1))
    clock.advance(30)
    store.record(make_sample(ttft_s=0.3))
    summary = store.snapshot().get("m", "d")
    assert summary is not None and summary.samples == 2

    clock.advance(29.9)  # the first slice is still the oldest of six
    summary = store.snapshot().get("m", "d")
    assert summary is not None and summary.samples == 2
    clock.advance(0.1)  # ... and now it is out
    summary = store.snapshot().get("m", "d")
    assert summary is not None and summary.samples == 1
    assert summary.quantile("ttft_s", 0.5) == summary.quantile("ttft_s", 0.0)

    clock.advance(30)
    assert store.snapshot().get("m", "d") is None


def test_long_attempts_count_when_they_end(clock: FakeClock) -> None:
    """A sample is placed by its arrival, not ``started_at``: a 10-minute stream still counts."""
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=10), clock)
    sample = make_sample(e2e_s=600.0)
    assert sample.started_at < clock.now - 600
    store.record(sample)
    summary = store.snapshot().get("m", "d")
    assert summary is not None and summary.count("e2e_s") == 1


def _recomputed(window: SlicedWindow) -> dict[tuple[str, str], DeploymentSummary]:
    totals: dict[tuple[str, str], DeploymentSummary] = {}
    for summaries in window.slices.values():
        for key, part in summaries.items():
            totals.setdefault(key, DeploymentSummary(*key)).merge(part)
    return totals


steps = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.floats(0.001, 10.0),
        st.sampled_from(["ok", "timeout", "upstream_error"]),
        st.floats(0.0, 25.0),
    ),
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(steps=steps)
def test_incremental_total_equals_the_sum_of_slices(steps: list[tuple[str, float, str, float]]) -> None:
    clock = FakeClock()
    window = SlicedWindow(60, 10, clock)
    for deployment, ttft, outcome, wait in steps:
        window.add(make_sample(deployment=deployment, ttft_s=ttft, outcome=outcome))  # type: ignore[arg-type]
        clock.advance(wait)
        window.expire()
        expected = _recomputed(window)
        assert set(window.total) == {k for k, s in expected.items() if s.outcomes}
        for key, total in window.total.items():
            assert total.outcomes == expected[key].outcomes
            assert {m: h.counts for m, h in total.histograms.items()} == {
                m: h.counts for m, h in expected[key].histograms.items() if h.counts
            }


def test_summaries_older_than_the_window_are_refused(clock: FakeClock) -> None:
    window = SlicedWindow(60, 10, clock)
    part = DeploymentSummary("m", "d")
    part.add(make_sample())
    current = window.oldest_kept() + 5
    assert window.add_summary(current, part)
    assert not window.add_summary(window.oldest_kept() - 1, part)
    assert window.total[("m", "d")].samples == 1


def test_store_works_bucket_indexes_out_once_with_the_same_counts(clock: FakeClock) -> None:
    """The store hands one ``sample_buckets`` to the window and the minute history: each counts what it
    counts when it works the buckets out itself."""
    clock.now = 1_800_000_000.0
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=10), clock)
    window = SlicedWindow(60, 10, clock)
    minutes = MinuteBuckets()
    samples = [
        make_sample(ttft_s=0.1),
        make_sample("m", "e", outcome="timeout", ttft_s=None, e2e_s=3.0),
        make_sample(ttft_s=0.7, tokens_per_s=None, output_tokens=None),
        make_sample("n", "d", outcome="upstream_error", ttft_s=0.2, output_tokens=9),
    ]
    for sample in samples:
        store.record(sample)
        window.add(sample)
        minutes.add(sample, clock())
        clock.advance(7)

    def counts(summaries: Mapping[tuple[str, str], DeploymentSummary]) -> dict[object, object]:
        return {
            key: (s.outcomes, s.validity, {m: (h.counts, h.count) for m, h in s.histograms.items()})
            for key, s in summaries.items()
        }

    assert counts(store.snapshot().summaries) == counts(window.snapshot().summaries)
    assert store.minutes.points(clock()) == minutes.points(clock())
    assert store.minutes.points(clock())  # something was compared


class _ReferenceStore:
    """The in-memory store as it counted before its record was fused: every value through ``sample_values`` and
    ``LogHistogram.add``, each summary on its own, the minutes filtered by ``HISTORY_METRICS``."""

    def __init__(self, window_s: int, slice_s: int, clock: FakeClock) -> None:
        self.slice_s, self.slices_in_window, self.clock = slice_s, window_s // slice_s, clock
        self.slices: dict[int, dict[tuple[str, str], DeploymentSummary]] = {}
        self.total: dict[tuple[str, str], DeploymentSummary] = {}
        self.minutes: dict[tuple[str, str], dict[int, DeploymentSummary]] = {}

    @staticmethod
    def _count(summary: DeploymentSummary, sample: Sample, metrics: frozenset[str] | None = None) -> None:
        summary.outcomes[sample.outcome] = summary.outcomes.get(sample.outcome, 0) + 1
        key = None if metrics is not None else validity_key(sample)
        if key is not None:
            summary.validity[key] = summary.validity.get(key, 0) + 1
        for metric, value in sample_values(sample).items():
            if metrics is None or metric in metrics:
                summary.histograms.setdefault(metric, LogHistogram()).add(value)

    def expire(self) -> None:
        oldest = math.floor(self.clock() / self.slice_s) - self.slices_in_window + 1
        for index in [i for i in self.slices if i < oldest]:
            for key, part in self.slices.pop(index).items():
                total = self.total.get(key)
                if total is not None:
                    subtract(total, part)
                    if not total.outcomes:
                        del self.total[key]

    def record(self, sample: Sample) -> None:
        self.expire()
        key = (sample.model, sample.deployment)
        index = math.floor(self.clock() / self.slice_s)
        for target in (self.slices.setdefault(index, {}), self.total):
            self._count(target.setdefault(key, DeploymentSummary(*key)), sample)
        minutes = self.minutes.setdefault(key, {})
        self._count(minutes.setdefault(int(self.clock() // 60), DeploymentSummary(*key)), sample, HISTORY_METRICS)


def _fingerprint(summaries: Mapping[tuple[str, str], DeploymentSummary]) -> list[object]:
    """Everything a reader can get of the summaries, floats compared exactly, in their orders."""
    out: list[object] = []
    for key, s in summaries.items():
        out.append((key, list(s.outcomes.items()), list(s.validity.items()), s.hit_ratio(), s.success_rate()))
        for metric, h in s.histograms.items():
            quantiles = [h.quantile(q) for q in (0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0)]
            out.append((metric, sorted(h.counts.items()), h.count, h._sum, quantiles, h.mean()))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_fused_record_keeps_what_sample_by_sample_counting_kept(seed: int) -> None:
    # The same samples, the same clock: the same snapshots (sums and quantiles to the last bit) and minutes,
    # whether a slice's and the minutes' samples wait to be counted in a batch or not.
    rng = random.Random(seed)
    steps = rng.choice([[0.0, 0.3, 2.0, 13.0], [0.0, 0.01, 0.05]])  # slices come and go; or 64 wait in one
    clock = FakeClock()
    store, reference = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=10), clock), _ReferenceStore(60, 10, clock)
    for _ in range(300):
        prompt = rng.choice([None, 0, 30, 1500, 40_000])
        sample = dataclasses.replace(
            make_sample(
                rng.choice("mn"),
                rng.choice("de"),
                outcome=rng.choice(["ok", "ok", "timeout", "client_cancelled"]),
                ttft_s=rng.choice([None, 0.0, 1e-7, rng.expovariate(3.0)]),
                tokens_per_s=rng.choice([None, rng.uniform(0, 3000), math.nan]),
                e2e_s=rng.choice([None, rng.expovariate(0.3)]),
                output_tokens=rng.choice([None, 0, rng.randint(1, 4000)]),
            ),
            usage_prompt_tokens=prompt,
            usage_cached_tokens=rng.choice([None, 0, rng.randint(0, 2000)]) if prompt else None,
            prompt_tokens_estimate=rng.choice([None, 25, 2048]),
            kind=rng.choice([None, "plain", "tools"]),
            validity=rng.choice([None, "valid", "empty"]),
        )
        store.record(sample)
        reference.record(sample)
        clock.advance(rng.choice(steps))
        if rng.random() < 0.2:
            reference.expire()
            assert _fingerprint(store.snapshot().summaries) == _fingerprint(reference.total)
        if rng.random() < 0.02:  # reading the slices counts what waits: the same counts, whenever read
            assert [_fingerprint(s) for s in store.window.slices.values()] == [
                _fingerprint(s) for s in reference.slices.values()
            ]
    reference.expire()
    assert _fingerprint(store.snapshot().summaries) == _fingerprint(reference.total)
    assert [(i, _fingerprint(s)) for i, s in store.window.slices.items()] == [
        (i, _fingerprint(s)) for i, s in reference.slices.items()
    ]
    assert {p: [(m, _fingerprint({p: s})) for m, s in ms.items()] for p, ms in store.minutes.minutes.items()} == {
        p: [(m, _fingerprint({p: s})) for m, s in ms.items()] for p, ms in reference.minutes.items()
    }


def test_sample_buckets_are_bucket_of_each_sample_value() -> None:
    # Worked out inline, in the order ``sample_values`` lists the values: the same buckets, edges included.
    rng = random.Random(9)
    edges = [None, 0.0, -1.0, 1e-6, 1.0000001e-6, math.nan, 1e-300, 0.5, 1.0, 123.456, 1e12]
    for _ in range(2000):
        prompt = rng.choice([None, 0, 30, 1024, 40_000])
        sample = dataclasses.replace(
            make_sample(
                outcome=rng.choice(["ok", "timeout"]),
                ttft_s=rng.choice([*edges, rng.expovariate(1.0)]),
                tokens_per_s=rng.choice([*edges, rng.uniform(0, 1e5)]),
                e2e_s=rng.choice(edges),
                output_tokens=rng.choice([None, 0, 1, rng.randint(2, 10**6)]),
            ),
            first_answer_s=rng.choice(edges),
            usage_prompt_tokens=prompt,
            usage_cached_tokens=rng.choice([None, 0, 2000]),
            prompt_tokens_estimate=rng.choice([None, 25, 2048]),
        )
        expected = {metric: bucket_of(value) for metric, value in sample_values(sample).items()}
        assert list(sample_buckets(sample).items()) == list(expected.items())
