"""The histogram against exact quantiles of random data: relative error ≤ 2% where it matters."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.stats.sketch import ZERO_BUCKET, LogHistogram, bucket_of, value_of


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
