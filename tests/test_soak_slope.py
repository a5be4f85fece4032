"""The soak's memory check: the RSS slope over the run's second half, per 100,000 requests."""

from __future__ import annotations

import pytest

from benchmarks.soak.report import RSS_SLOPE_BOUND_MB, rss_slopes


def test_the_slope_is_fitted_over_the_second_half_per_100k_requests() -> None:
    # 200 s at 100 req/s (20,000 requests); replica 0 flat after a warm-up, replica 1 growing 1 MB per 100 s.
    rss = [(float(t), [140.0 + (20.0 if t > 50 else t * 0.4), 140.0 + t / 100]) for t in range(0, 201, 5)]
    flat, growing = rss_slopes(rss, 20_000, 200.0)
    assert flat == pytest.approx(0.0, abs=1e-9)  # the warm-up before the middle does not count
    assert growing == pytest.approx(10.0)  # 0.01 MB/s over 100 requests/s: 1e-4 MB per request
    assert growing > RSS_SLOPE_BOUND_MB >= flat


def test_too_few_samples_give_no_slope() -> None:
    assert rss_slopes([(0.0, [1.0]), (10.0, [2.0])], 100, 10.0) == []
    assert rss_slopes([], 100, 10.0) == []


def test_a_step_at_the_provider_kill_is_not_read_as_growth() -> None:
    # Flat on both sides, 6 MB more from the kill at 150 s on (its connections, its streams' recoveries): a line
    # straddling the step reads that as growth; one slope with an intercept per side does not.
    rss = [(float(t), [140.0 + (6.0 if t >= 150 else 0.0) + t / 1000]) for t in range(0, 201, 5)]
    (straddled,) = rss_slopes(rss, 20_000, 200.0)
    (stepped,) = rss_slopes(rss, 20_000, 200.0, steps=[150.0])
    assert straddled > RSS_SLOPE_BOUND_MB
    assert stepped == pytest.approx(1.0)  # 0.001 MB/s over 100 requests/s: 1 MB per 100,000 requests
