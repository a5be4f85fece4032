"""The window counting a sample in its slice and its total in one pass (``SlicedWindow.add``), the minutes counting
their batch inline (``MinuteBuckets._count_pending``), the store's record adding to the minutes and the answer log
itself, and ``count_buckets`` with each bucket's value looked up once, against counting value by value with
``LogHistogram.add_bucket`` (``value_of`` per value, the former arithmetic): the same counts, sums, bucket order, dict
orders, slices, minutes, snapshots and quantiles after any sequence of samples."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from gateway.config import StatsConfig
from gateway.samples import Sample
from gateway.stats.history import MinuteBuckets
from gateway.stats.memory import InMemoryStatsStore
from gateway.stats.sketch import ZERO_BUCKET, LogHistogram, count_buckets, value_of
from gateway.stats.snapshot import DeploymentSummary, Metric, sample_buckets, validity_key
from gateway.stats.window import SlicedWindow
from gateway.types import DeploymentKey
from tests.test_sink_shortcuts import _Clock, _random_sample, _state


def _count_one_by_one(summary: DeploymentSummary, sample: Sample, buckets: Mapping[Metric, int]) -> None:
    """One sample counted as the window counted it before: outcome, validity, then each value by ``add_bucket``."""
    summary.outcomes[sample.outcome] = summary.outcomes.get(sample.outcome, 0) + 1
    validity = validity_key(sample)
    if validity is not None:
        summary.validity[validity] = summary.validity.get(validity, 0) + 1
    for metric, bucket in buckets.items():
        histogram = summary.histograms.get(metric)
        if histogram is None:
            histogram = summary.histograms[metric] = LogHistogram()
        histogram.add_bucket(bucket)


class _FormerWindow(SlicedWindow):
    """The window counting each sample in its slice and total summary by summary, value by value."""

    def add(
        self, sample: Sample, buckets: Mapping[Metric, int] | None = None, key: DeploymentKey | None = None
    ) -> None:
        index = math.floor(self.wall_clock() / self.slice_s)
        if index != self._expired_for:
            self.expire()
            self._expired_for = index
        key = (sample.model, sample.deployment)
        every = sample_buckets(sample)
        summaries = self.slices.setdefault(index, {})
        for target in (summaries, self.total):
            summary = target.get(key)
            if summary is None:
                summary = target[key] = DeploymentSummary(*key)
            _count_one_by_one(summary, sample, every)


class _FormerMinutes(MinuteBuckets):
    """The minutes counting each pending sample's two kept values by ``add_bucket``, value by value."""

    def _count_pending(self) -> None:
        pending, self._pending = self._pending, []
        for pair, minute, outcome, every in pending:
            summary = self._summary(pair, minute)
            summary.outcomes[outcome] = summary.outcomes.get(outcome, 0) + 1
            for metric in ("ttft_s", "tokens_per_s"):
                if metric in every:
                    histogram = summary.histograms.get(metric)
                    if histogram is None:
                        histogram = summary.histograms[metric] = LogHistogram()
                    histogram.add_bucket(every[metric])


class _FormerStore(InMemoryStatsStore):
    """The store's record through each part's own ``add`` (the minutes' and the answer log's, not inline)."""

    def record(self, sample: Sample) -> None:
        buckets = sample_buckets(sample)
        now = self.wall_clock()
        pair = (sample.model, sample.deployment)
        self.window.add(sample, buckets, pair)
        self.minutes.add(sample, now, buckets, pair)
        answer = self.recorder.answer(sample, now)
        if answer is not None:
            self.answers.add(pair, answer)


def _keys(store: InMemoryStatsStore) -> list[object]:
    """Each histogram's kept bucket order (None until a quantile asked for it), total then slices."""
    window = store.window
    parts = [window.total, *window.slices.values()]
    return [[(key, m, h._keys) for key, s in part.items() for m, h in s.histograms.items()] for part in parts]


def test_the_window_counts_in_one_pass_what_it_counted_value_by_value() -> None:
    """20 random sequences of 300 samples, the clock moving by random steps (slices closing and leaving the window,
    minutes turning), quantiles and minutes read now and then (the kept bucket order then updated in place), against
    the store, window and minutes counting value by value: equal states (total, slices, minutes, answers, marks) at 40
    points each."""
    for seed in range(20):
        rng = random.Random(seed)
        clock_a, clock_b = _Clock(), _Clock()
        config = StatsConfig(window_s=60, slice_s=10)
        new = InMemoryStatsStore(config, clock_a, replica="r")
        old = _FormerStore(config, clock_b, replica="r")
        old.window = _FormerWindow(config.window_s, config.slice_s, clock_b)
        old.minutes = _FormerMinutes()
        for n in range(300):
            step = rng.choice((0.0, 0.0, 0.5, 3.0, 11.0, 70.0))
            clock_a.now += step
            clock_b.now += step
            sample = _random_sample(rng)
            new.record(sample)
            old.record(sample)
            if rng.random() < 0.1:
                a, b = new.snapshot(), old.snapshot()
                assert a.taken_at == b.taken_at
                assert list(a.summaries) == list(b.summaries)
                for key, summary in b.summaries.items():
                    mine = a.summaries[key]
                    assert (mine.attempts, mine.success_rate(), mine.valid_counts()) == (
                        summary.attempts,
                        summary.success_rate(),
                        summary.valid_counts(),
                    )
                    for metric, histogram in summary.histograms.items():
                        other = mine.histograms[metric]
                        assert (other.mean(), other.total()) == (histogram.mean(), histogram.total())
                        for q in (0.0, 0.05, 0.5, 0.95, 1.0):
                            assert other.quantile(q) == histogram.quantile(q), (seed, n, key, metric, q)
            if rng.random() < 0.05:
                assert new.minutes.points(clock_a.now) == old.minutes.points(clock_b.now)
            if n % 8 == 0 or n == 299:
                assert _state(new) == _state(old), (seed, n)
                assert _keys(new) == _keys(old), (seed, n)


def test_count_buckets_sums_what_add_bucket_summed() -> None:
    """20,000 random buckets (the zero bucket among them) counted in one histogram by ``count_buckets`` and in another
    by ``add_bucket``: the same counts, count and sums, bit for bit, after every step."""
    rng = random.Random(7)
    mine: dict[str, LogHistogram] = {}
    theirs = LogHistogram()
    for _ in range(20_000):
        bucket = ZERO_BUCKET if rng.random() < 0.05 else rng.randrange(-900, 1200)
        count_buckets(mine, {"m": bucket})
        theirs.add_bucket(bucket)
        ours = mine["m"]
        assert (ours.counts, ours.count, ours._sum) == (theirs.counts, theirs.count, theirs._sum)


def test_a_bucket_value_is_worked_out_once_and_the_zero_bucket_is_zero() -> None:
    for bucket in (ZERO_BUCKET, -700, -1, 0, 1, 37, 1100):
        assert value_of(bucket) is value_of(bucket)
    assert value_of(ZERO_BUCKET) == 0.0
    assert isinstance(SlicedWindow(60, 10, _Clock()).slices, dict)
