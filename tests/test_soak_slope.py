"""The soak's memory check: the RSS slope over the run's second half and the live memory slope over the heap
records, per 100,000 requests."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from benchmarks.soak import heap
from benchmarks.soak.heap import HeapPoint
from benchmarks.soak.report import RSS_SLOPE_BOUND_MB, live_slopes, rss_slopes, settled_rss_slopes


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


def test_the_live_memory_slope_is_fitted_over_the_heap_records_per_100k_requests() -> None:
    # Records at 56,000 .. 80,000 requests: replica 0 holds 60 MB give or take in-flight noise, replica 1 gains
    # 0.5 MB per 10,000 requests (5 MB per 100,000).
    noise = [0.1, -0.1, 0.05, -0.05, 0.0, 0.1, -0.1]
    requests = [56_000 + 4_000 * i for i in range(7)]
    flat = [HeapPoint(n, 60.0 + e, 40_000, 117.0, 0) for n, e in zip(requests, noise, strict=True)]
    growing = [HeapPoint(n, 60.0 + (n - 56_000) * 5e-5, 40_000, 117.0, 0) for n in requests]
    still, leaking = live_slopes([flat, growing])
    assert abs(still) < RSS_SLOPE_BOUND_MB
    assert leaking == pytest.approx(5.0)
    assert live_slopes([flat[:2], growing[:2]]) == []


def test_a_replica_records_its_live_heap_on_a_signal(tmp_path: Path) -> None:
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        heap._install(tmp_path, frames=0, trace_from=0, collect=True)
        kept: list[list[list[int]]] = []
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGUSR1)  # its Python handler runs in this thread before the next line
            kept.append([[] for _ in range(20_000)])  # 20,000 more gc-tracked objects live at each later record
        marks = [(0.0, 1_000), (1.0, 2_000), (2.0, 3_000)]
        points = heap.read_points(tmp_path, os.getpid(), marks, wait_s=5.0)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert [p.requests for p in points] == [1_000, 2_000, 3_000]
    assert points[0].live_mb > 0
    assert abs(points[2].objects - points[0].objects - 40_000) < 1_000  # the lists kept, give or take the test's own
    assert points[2].live_mb > points[0].live_mb


def test_the_settled_rss_slope_counts_requests_done_not_seconds() -> None:
    # 100 req/s until 100 s, then 50 req/s (the kill: streams take longer); RSS grows 1 MB per 10,000 requests
    # throughout, after a 2 MB step at the kill that the fit from 150 s on leaves out.
    done = [i / 100 for i in range(10_000)] + [100 + i / 50 for i in range(10_000)]
    rss = []
    for t in range(0, 300, 2):
        n = min(t, 100) * 100 + max(t - 100, 0) * 50
        rss.append((float(t), [100.0 + (2.0 if t >= 100 else 0.0) + n / 10_000, 100.0]))
    growing, flat = settled_rss_slopes(rss, done, 150.0)
    assert growing == pytest.approx(10.0, rel=0.01)  # per 100,000 requests, whatever the rate in seconds
    assert flat == pytest.approx(0.0, abs=1e-9)
    assert settled_rss_slopes(rss, done, 296.0) == []  # fewer than 3 samples
