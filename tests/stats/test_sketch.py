"""The histogram against exact quantiles of random data: relative error ≤ 2% where it matters."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.stats.sketch import ZERO_BUCKET, LogHistogram, bucket_of, count_buckets, value_of


def exact_quantile(values: list[float], q: float) -> float:
    """The definition the histogram approximates: the value at rank floor(q * (n - 1))."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def log_uniform(low: float, high: float) -> st.SearchStrategy[float]:
    """Values spread evenly over orders of magnitude, as latencies and speeds are."""
    return (
        st.floats(min_value=math.log(low), max_value=math.log(high)).map(math.exp).map(lambda v: min(max(v, low), high))
    )


QUANTILES = st.sampled_from([0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0]) | st.floats(0.0, 1.0)


def histogram_of(values: list[float]) -> LogHistogram:
    histogram = LogHistogram()
    for value in values:
        histogram.add(value)
    return histogram


@settings(max_examples=300, deadline=None)
@given(values=st.lists(log_uniform(0.001, 600.0), min_size=1, max_size=400), q=QUANTILES)
def test_time_quantiles_within_2_percent(values: list[float], q: float) -> None:
    estimate = histogram_of(values).quantile(q)
    exact = exact_quantile(values, q)
    assert estimate is not None
    assert abs(estimate - exact) <= 0.02 * exact


@settings(max_examples=300, deadline=None)
@given(values=st.lists(log_uniform(0.1, 100_000.0), min_size=1, max_size=400), q=QUANTILES)
def test_speed_quantiles_within_2_percent(values: list[float], q: float) -> None:
    estimate = histogram_of(values).quantile(q)
    exact = exact_quantile(values, q)
    assert estimate is not None
    assert abs(estimate - exact) <= 0.02 * exact


@settings(max_examples=200, deadline=None)
@given(
    left=st.lists(log_uniform(0.001, 100_000.0), max_size=200),
    right=st.lists(log_uniform(0.001, 100_000.0), max_size=200),
)
def test_merge_is_adding_buckets(left: list[float], right: list[float]) -> None:
    merged = histogram_of(left)
    merged.merge(histogram_of(right))
    assert merged == histogram_of(left + right)
    assert merged.count == len(left) + len(right)
    assert LogHistogram.merged([histogram_of(left), histogram_of(right)]) == merged


@given(value=log_uniform(1e-5, 1e6))
def test_every_value_is_reported_within_1_percent(value: float) -> None:
    reported = value_of(bucket_of(value))
    assert abs(reported - value) <= 0.0101 * value
    assert isinstance(bucket_of(value), int)


def test_zero_and_empty() -> None:
    assert LogHistogram().quantile(0.5) is None
    assert LogHistogram().mean() is None
    histogram = histogram_of([0.0, 0.0, 5.0])
    assert bucket_of(0.0) == ZERO_BUCKET
    assert histogram.quantile(0.0) == 0.0
    top = histogram.quantile(1.0)
    assert top is not None and abs(top - 5.0) <= 0.05


def walked_quantile(counts: dict[int, int], count: int, q: float) -> float | None:
    """The quantile as the histogram first computed it: sort the buckets, walk them until the rank is passed."""
    if count == 0:
        return None
    if q in (0.0, 1.0):
        return value_of(min(counts) if q == 0.0 else max(counts))
    rank, seen = math.floor(q * (count - 1)), 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen > rank:
            return value_of(bucket)
    return None


READ_AT = (0.0, 0.001, 0.01, 0.05, 0.16, 0.25, 0.5, 0.75, 0.84, 0.9, 0.95, 0.99, 0.999, 1.0)


def random_histogram(rng: random.Random, samples: int) -> LogHistogram:
    histogram = LogHistogram()
    for _ in range(samples):
        histogram.add(0.0 if rng.random() < 0.02 else rng.lognormvariate(rng.choice([-0.7, 4.4]), 0.5))
    return histogram


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_quantiles_after_any_change_are_the_sorted_walks_exactly(seed: int) -> None:
    # Adds, counted buckets, merges and subtractions of merged parts, in any order, read between them at many
    # quantiles (some twice, so that memoized answers are read too): the same floats as sorting and walking.
    rng = random.Random(seed)
    histograms = {"h": random_histogram(rng, rng.choice([0, 5, 300]))}
    merged: list[LogHistogram] = []
    for _ in range(120):
        histogram = histograms["h"]
        step = rng.randrange(6)
        if step == 0:
            histogram.add(rng.lognormvariate(-0.7, 1.5), rng.choice([1, 1, 2, 5]))
        elif step == 1:
            histogram.add_bucket(rng.choice([ZERO_BUCKET, *histogram.counts, rng.randrange(-200, 400)]))
        elif step == 2:
            count_buckets(histograms, {"h": bucket_of(rng.lognormvariate(4.4, 0.8)), "other": rng.randrange(99)})
        elif step == 3:
            merged.append(random_histogram(rng, rng.choice([1, 20, 200])))
            histogram.merge(merged[-1])
        elif step == 4 and merged:
            histogram.subtract(merged.pop(rng.randrange(len(merged))))
        for q in (*rng.sample(READ_AT, 5), rng.random(), rng.random()):
            for _ in range(rng.choice([1, 2])):
                assert histogram.quantile(q) == walked_quantile(histogram.counts, histogram.count, q)
        assert histogram._keys is None or histogram._keys == sorted(histogram.counts)
