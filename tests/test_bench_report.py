"""The benchmark's percentiles: nearest rank over every request, failures kept in the denominator."""

from __future__ import annotations

import asyncio
import io

from gateway.bench import BenchTarget, RequestResult
from gateway.bench.progress import BenchProgress
from gateway.bench.report import floor_quantile, format_table, summarize, summarize_by_provider, upper_quantile
from gateway.leaderboard import MIN_RANKED_ANSWERS
from gateway.samples import Outcome


def test_nearest_rank_quantiles_rank_failures_as_the_worst() -> None:
    speeds = [float(v) for v in range(1, 21)]  # 1..20
    assert floor_quantile(speeds, 0, 0.05) == 1.0  # rank 1 of 20, not 2 (0.05 * 20 is not exactly 1.0)
    assert floor_quantile(speeds, 0, 0.50) == 10.0
    assert floor_quantile(speeds[1:], 1, 0.05) == 0.0  # one failure of 20: the p95 floor reached nothing
    assert floor_quantile(speeds[2:], 2, 0.05) == 0.0
    assert floor_quantile([], 0, 0.5) is None

    latencies = [float(v) for v in range(1, 101)]  # 1..100
    assert upper_quantile(latencies, 0, 0.99) == 99.0
    assert upper_quantile(latencies[:99], 1, 0.99) == 99.0  # 1 failure in 100: p99 still lands on a value
    assert upper_quantile(latencies[:98], 2, 0.99) is None  # 2 failures in 100: p99 lands on a failure
    assert upper_quantile([], 3, 0.5) is None


def _result(target: str, index: int, outcome: Outcome, tps: float | None, ttft: float | None) -> RequestResult:
    e2e = None if outcome != "ok" else (ttft or 0) + 1.0
    return RequestResult(target, index, 0, outcome, 0.0, 200, ttft, ttft, tps, e2e, 10, None, None, 10)


def test_summaries_are_sorted_by_speed_with_the_distance_to_the_fastest() -> None:
    targets = [BenchTarget(name, "direct", "http://x/v1", name) for name in ("a", "b", "c")]
    results = [_result("a", i, "ok", 50.0, 0.2) for i in range(4)]
    results += [_result("b", i, "ok", 100.0, 0.5) for i in range(3)] + [_result("b", 3, "timeout", None, None)]
    results += [_result("c", i, "upstream_error", None, None) for i in range(4)]

    summaries = summarize(targets, results)

    assert [s.target for s in summaries] == ["b", "a", "c"]
    b, a, c = summaries
    assert b.delta_vs_fastest == 0.0 and a.delta_vs_fastest == -0.5
    assert b.success_rate == 0.75 and b.tps_p95_floor == 0.0 and b.ttft_p95_s is None and b.ttft_p50_s == 0.5
    assert c.success_rate == 0.0 and c.tps_p50 == 0.0
    table = format_table(summaries).splitlines()
    assert table[0].split()[:2] == ["Target", "Tokens/s"]
    assert table[2].split() == ["b", "100.0", "fastest", "0.0", "0.0", "fail", "fail", "75.0", "4"]
    assert table[3].split()[:3] == ["a", "50.0", "-50%"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _targets(*names: str) -> list[BenchTarget]:
    return [BenchTarget(name, "direct", "http://x/v1", name) for name in names]


def test_progress_says_done_errors_and_in_flight_per_target() -> None:
    now = [0.0]
    piped = io.StringIO()
    progress = BenchProgress(_targets("a", "b"), 3, piped, clock=lambda: now[0])
    for target in _targets("a", "a", "b"):
        progress.started(target)
    progress.finished(_result("a", 0, "ok", 10.0, 0.1))
    progress.finished(_result("a", 1, "timeout", None, None))
    now[0] = 75.0
    assert progress.line() == "[1:15] 2/6 requests done, 1 error | a 2/3 (1 error) | b 0/3 (1 in flight)"
    assert piped.getvalue() == ""  # not a terminal: no bar, only the reported lines
    progress.report()
    progress.close()
    assert piped.getvalue() == progress.line() + "\n"


def test_progress_lines_come_while_the_run_is_waiting() -> None:
    piped = io.StringIO()
    progress = BenchProgress(_targets("slow"), 1, piped, every_s=0.01)

    async def run() -> None:
        progress.started(_targets("slow")[0])
        work = asyncio.ensure_future(asyncio.sleep(0.2))
        await progress.report_while(work)

    asyncio.run(run())
    lines = piped.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.endswith("| slow 0/1 (1 in flight)") for line in lines)


def test_the_bar_is_drawn_on_a_terminal() -> None:
    terminal = _Terminal()
    progress = BenchProgress(_targets("a"), 4, terminal)
    progress.finished(_result("a", 0, "ok", 10.0, 0.1))
    progress.finished(_result("a", 1, "timeout", None, None))
    progress.report()
    progress.close()
    drawn = terminal.getvalue()
    assert "\r[" in drawn and "2/4 requests, 1 error" in drawn and drawn.endswith("\n")
    assert "\r\x1b[K[0:00] 2/4 requests done, 1 error | a 2/4 (1 error)\n" in drawn  # the bar's line cleared first


def test_results_through_a_gateway_split_by_the_provider_that_served() -> None:
    gateway = BenchTarget("gateway/m", "gateway", "http://g/v1", "m")
    direct = BenchTarget("m/x", "direct", "http://x/v1", "x")
    results = [
        RequestResult("gateway/m", 0, 0, "ok", 0.0, 200, 0.1, 0.1, 100.0, 1.0, 10, served_by="fast"),
        RequestResult("gateway/m", 1, 0, "ok", 0.0, 200, 0.1, 0.1, 120.0, 1.0, 10, served_by="fast"),
        RequestResult("gateway/m", 2, 0, "ok", 0.0, 200, 0.5, 0.5, 40.0, 2.0, 10, served_by="slow"),
        RequestResult("gateway/m", 3, 0, "upstream_error", 0.0, 502),
        _result("m/x", 0, "ok", 10.0, 0.1),
    ]
    rows = summarize_by_provider([gateway, direct], results)
    assert [(r.target, r.requests, r.ok) for r in rows] == [
        ("gateway/m via fast", 2, 2),
        ("gateway/m via slow", 1, 1),
        ("gateway/m via (no provider)", 1, 0),
    ]
    # Two answers and one are too few to compare: the router's split is uneven, and one quick answer is no crown.
    assert [r.delta_vs_fastest for r in rows] == [None, None, None]
    assert summarize_by_provider([direct], results) == []
    more = [
        RequestResult("gateway/m", 10 + i, 0, "ok", 0.0, 200, 0.5, 0.5, 40.0, 2.0, 10, served_by="slow")
        for i in range(MIN_RANKED_ANSWERS)
    ]
    ranked = summarize_by_provider([gateway], results + more)
    assert [(r.target, r.delta_vs_fastest) for r in ranked][:2] == [
        ("gateway/m via slow", 0.0),
        ("gateway/m via fast", None),
    ]
    table = format_table(rows).splitlines()  # each provider's share of the requests, beside its figures
    assert table[0].split()[-1] == "Requests"
    assert [line.split()[-1] for line in table[2:]] == ["2", "1", "1"]
