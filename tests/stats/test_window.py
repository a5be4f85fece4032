"""The sliced window with an injected clock: samples count in the slice of their arrival, leave
the window whole slices at a time, and the incremental total always equals the slices' sum."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import StatsConfig
from gateway.stats import InMemoryStatsStore
from gateway.stats.history import MinuteBuckets
from gateway.stats.snapshot import DeploymentSummary
from gateway.stats.window import SlicedWindow
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
