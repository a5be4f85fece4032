"""The soak's results as Markdown: what was lost, latency around each event, memory over time."""

from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from benchmarks.figures import quantile, utc_minute
from benchmarks.procs import machine
from benchmarks.soak.fleet import FAKES, TOKENS, WINDOW_S
from benchmarks.soak.heap import HeapPoint
from benchmarks.soak.load import Marks, Outcome, Timeline, Watch, total


def ms(value: float | None) -> str:
    return "–" if value is None or value != value else f"{value * 1000:.0f}"


def window_stats(outcomes: list[Outcome], start: float, end: float) -> str:
    inside = [o for o in outcomes if start <= o.started < end]
    ok = [o for o in inside if o.ok]
    ttft = [o.ttft_s for o in ok if o.ttft_s is not None]
    e2e = [o.ended - o.started for o in ok]
    lost = len(inside) - len(ok)
    return (
        f"| {start:.1f}–{end:.1f} s | {len(inside)} | {lost} | {ms(quantile(ttft, 0.5))} | {ms(quantile(ttft, 0.99))} "
        f"| {ms(quantile(e2e, 0.5))} | {ms(quantile(e2e, 0.99))} |"
    )


def delta(after: list[Any], before: list[Any], name: str, **labels: str) -> float:
    return total(after, name, **labels) - (total(before, name, **labels) if before else 0.0)


def report(
    outcomes: list[Outcome],
    timeline: Timeline,
    observed: Watch,
    marks: Marks,
    scraped: list[Any],
    boards: list[Any],
    command: str,
    wall_s: float,
    concurrency: int,
    heap: Sequence[Sequence[HeapPoint]] = (),
) -> str:
    now = utc_minute()
    ok = [o for o in outcomes if o.ok]
    lost = [o for o in outcomes if not o.ok]
    ttft = [o.ttft_s for o in ok if o.ttft_s is not None]
    e2e = [o.ended - o.started for o in ok]
    victim = marks.victim
    kill_at = next((t for t, what in timeline.events if "killed (SIGKILL), the one" in what), None)
    redis_down = next((t for t, what in timeline.events if what.startswith("redis-server killed")), None)
    redis_up = next((t for t, what in timeline.events if what.startswith("redis-server started")), None)
    lines = [
        "# Soak: two replicas, one Redis, Redis restarted and a provider killed midway",
        "",
        f"Measured {now} on {machine()}.",
        "",
        f"Command: `{command}`. Separate processes on loopback: a `redis-server` of its own (no persistence),",
        "three fake providers (`python -m gateway fake-provider`), two replicas (`python -m gateway serve` through",
        "`benchmarks.soak.heap`, which adds a handler that records the heap on a signal,",
        f"stats backend redis with a {WINDOW_S} s window, client keys with per-key limits counted in Redis) and",
        "the client (aiohttp on uvloop, one process, sending to the replicas in turn); all share the 2 cores.",
        "Every deployment is marked `continue_prefill`. A request counts as served only if the client read",
        f"the exact expected answer ({TOKENS} words), one role chunk, no error event and exactly one `[DONE]`;",
        "anything else is *lost*. At least two providers were up at all times, so every request had a",
        "healthy alternative: the target is 0 lost.",
        "",
        "Providers: "
        + "; ".join(
            f"`{s.name}` TTFT {s.ttft_s:g} s, {s.tokens_per_s:g} tokens/s (log-normal jitter 0.2), ${s.price:g}/M in"
            for s in FAKES
        )
        + ".",
        "",
        "## Result",
        "",
        f"- Requests: **{len(outcomes)}** streamed, concurrency {concurrency}, in {wall_s:.1f} s "
        f"({len(outcomes) / wall_s:.0f} req/s).",
        f"- **Lost: {len(lost)}** (target 0).",
        f"- Latency of served requests (client side, ms): TTFT p50 {ms(quantile(ttft, 0.5))}, "
        f"p95 {ms(quantile(ttft, 0.95))}, p99 {ms(quantile(ttft, 0.99))}; end-to-end p50 {ms(quantile(e2e, 0.5))}, "
        f"p95 {ms(quantile(e2e, 0.95))}, p99 {ms(quantile(e2e, 0.99))}.",
    ]
    if lost:
        reasons = Counter(o.failure.split(":")[0] for o in lost)
        lines.append("- Lost by reason: " + ", ".join(f"{reason}: {count}" for reason, count in reasons.most_common()))
        for o in lost[:10]:
            lines.append(f"  - at {o.started:.2f} s, replica {o.replica}, provider {o.provider or '?'}: {o.failure}")
    recovered = total(scraped, "gateway_stream_breaks_total", result="recovered")
    failed = total(scraped, "gateway_stream_breaks_total", result="failed")
    lines += [
        f"- Streams that broke mid-answer: {recovered + failed:.0f}, of which **{recovered:.0f} recovered** "
        f"(finished by another provider) and {failed:.0f} not.",
        f"- Fallbacks before the first byte: {total(scraped, 'gateway_fallbacks_total'):.0f}.",
        f"- Stats samples dropped by the replicas: {total(scraped, 'gateway_stats_samples_dropped_total'):.0f}.",
    ]
    if observed.host_load:
        loads = sorted(observed.host_load)
        lines.append(
            f"- Host load (1-minute load average, sampled beside the load, {os.cpu_count()} cores; the soak's own "
            f"processes count in it): median {loads[len(loads) // 2]:.1f}, max {loads[-1]:.1f}."
        )
    if rss := memory_summary(observed):
        lines.append(f"- Replica memory: {rss}")
    steps = [t for t in (kill_at, redis_down) if t is not None]
    if slopes := rss_slopes(observed.rss, len(outcomes), wall_s, steps):
        lines.append(
            "- RSS slope over the run's second half (stats window full), least squares on each side of the "
            "Redis restart and the provider kill (one slope, an intercept per side): "
            + ", ".join(f"replica {i} {s:+.2f} MB" for i, s in enumerate(slopes))
            + " per 100,000 requests (this fit counts the rise that follows the kill, which lasts about a minute, "
            "as slope)."
        )
    settled_at = marks.heap_at[0][0] if marks.heap_at else (kill_at or 0.0) + WINDOW_S + 10
    done = sorted(o.ended for o in outcomes)
    if settled := settled_rss_slopes(observed.rss, done, settled_at):
        verdict = "within" if max(settled) <= RSS_SLOPE_BOUND_MB else "**over**"
        lines.append(
            f"- RSS slope once the provider kill settled (from {settled_at:.0f} s, the first heap record, to the "
            "end; least squares against the requests done): "
            + ", ".join(f"replica {i} {s:+.2f} MB" for i, s in enumerate(settled))
            + f" per 100,000 requests: {verdict} the bound of {RSS_SLOPE_BOUND_MB:g} MB."
        )
    lines += live_memory_lines(heap)
    outcomes_shown = ("ok", "upstream_error", "timeout", "broken_stream", "client_cancelled")
    lines += [
        "",
        "Upstream attempts by provider and outcome (both replicas, from `/metrics`):",
        "",
        "| provider | " + " | ".join(outcomes_shown) + " |",
        "|---|" + "---|" * len(outcomes_shown),
    ]
    for spec in FAKES:
        cells = [
            f"{total(scraped, 'gateway_upstream_requests_total', provider=spec.name, outcome=o):.0f}"
            for o in outcomes_shown
        ]
        lines.append(f"| {spec.name}{' (killed)' if spec.name == victim else ''} | " + " | ".join(cells) + " |")
    lines += ["", "## What happened at each event", ""]
    if redis_down is not None and redis_up is not None:
        during = [o for o in outcomes if redis_down <= o.started < redis_up + 5]
        degraded = [t for t, what in timeline.events if "/readyz: degraded" in what]
        ready = [t for t, what in timeline.events if "/readyz: ready" in what and t > redis_down]
        lines += [
            f"**Redis killed at {redis_down:.1f} s, started again (empty) at {redis_up:.1f} s.** "
            f"{len(during)} requests started between the kill and 5 s after the restart; "
            f"{sum(not o.ok for o in during)} lost. Both replicas reported `degraded` on `/readyz` "
            + (f"from {min(degraded):.1f} s " if degraded else "")
            + (f"until {max(ready):.1f} s" if ready else "to the end")
            + " (the stats store and the rate limiter each name Redis; each replica's limiter counted on its own "
            "and pushed its counts when Redis returned, the router kept routing on each replica's own recent "
            "samples). Samples were buffered "
            f"and flushed on reconnect: {total(scraped, 'gateway_stats_samples_dropped_total'):.0f} dropped. "
            "At the end both replicas read the same shared window:",
            "",
            "| deployment | samples (replica 0) | samples (replica 1) | success | TTFT p50 ms | tokens/s p50 |",
            "|---|---|---|---|---|---|",
        ]
        by_replica = [{row["deployment"]: row for row in board["data"]} for board in boards]
        for spec in FAKES:
            rows = [board.get(spec.name, {}) for board in by_replica]
            first = rows[0] if rows else {}
            success = first.get("success_rate")
            speed = first.get("tokens_per_s_p50")
            lines.append(
                f"| {spec.name} | "
                + " | ".join(str(row.get("samples", "–")) for row in rows)
                + f" | {'–' if success is None else f'{success:.3f}'} | {ms(first.get('ttft_p50_s'))} | "
                + ("–" if speed is None else f"{speed:.1f}")
                + " |"
            )
        lines.append("")
    if kill_at is not None and victim:
        before = marks.at_provider_kill
        after_outcomes = [o for o in outcomes if o.started >= kill_at]
        broke = delta(scraped, before, "gateway_stream_breaks_total", provider=victim, result="recovered")
        broke_failed = delta(scraped, before, "gateway_stream_breaks_total", provider=victim, result="failed")
        refused = delta(scraped, before, "gateway_upstream_requests_total", provider=victim, outcome="upstream_error")
        cut = delta(scraped, before, "gateway_upstream_requests_total", provider=victim, outcome="broken_stream")
        served = {
            spec.name: delta(scraped, before, "gateway_upstream_requests_total", provider=spec.name, outcome="ok")
            for spec in FAKES
        }
        circuit = [t for t, what in timeline.events if "circuits:" in what and victim in what and t >= kill_at]
        lines += [
            f"**`{victim}` killed at {kill_at:.1f} s** (SIGKILL; it had the most attempts). Its streams in flight "
            f"broke: {broke:.0f} mid-answer, **all finished by another provider** "
            f"({broke_failed:.0f} could not be), and {cut - broke:.0f} before their first token (fallback). "
            f"{refused:.0f} later attempts found the port closed and fell back at once"
            + (f"; its circuit opened on the replicas from {min(circuit):.1f} s" if circuit else "")
            + f". Of the {len(after_outcomes)} requests started after the kill, "
            f"{sum(not o.ok for o in after_outcomes)} were lost. Answers completed after the kill: "
            + ", ".join(f"{name} {count:.0f}" for name, count in served.items())
            + ".",
            "",
        ]
    lines += [
        "## Timeline",
        "",
        "| t (s) | event |",
        "|---|---|",
        *(f"| {t:.2f} | {what} |" for t, what in timeline.events),
        "",
        "## Latency around each event",
        "",
        "Requests by start time; TTFT and end-to-end of the served ones, in ms.",
        "",
        "| window | requests | lost | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    end = max((o.ended for o in outcomes), default=0.0)
    marks_at = sorted({0.0, *(t for t in (redis_down, redis_up, kill_at) if t is not None), end})
    for start, stop_at in zip(marks_at, marks_at[1:], strict=False):
        lines.append(window_stats(outcomes, start, stop_at))
    lines += [
        "",
        "## Replica memory (RSS, MB)",
        "",
        "| t (s) | replica 0 | replica 1 |",
        "|---|---|---|",
    ]
    step = max(1, len(observed.rss) // 15)
    for t, values in observed.rss[::step] + ([observed.rss[-1]] if observed.rss else []):
        lines.append(f"| {t:.0f} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    return "\n".join(lines) + "\n"


RSS_SLOPE_BOUND_MB = 1.0
"""Memory flat: the live memory may grow at most this much per 100,000 requests once the last fault settled."""


def settled_rss_slopes(rss: list[tuple[float, list[float]]], done: Sequence[float], start: float) -> list[float]:
    """Each replica's RSS slope in MB per 100,000 requests from ``start`` on: least squares of RSS against the
    requests done by each sample (``done``: the requests' end times, sorted), so a slower stretch (after the
    kill, streams take longer) is not read as fewer requests. Empty with fewer than 3 samples or none done."""
    late = [(float(bisect.bisect_right(done, t)), values) for t, values in rss if t >= start]
    if len(late) < 3:
        return []
    spread = _spread([n for n, _ in late])
    if spread <= 0:
        return []
    return [_covariance([(n, v[i]) for n, v in late]) / spread * 100_000 for i in range(len(late[0][1]))]


def live_slopes(heap: Sequence[Sequence[HeapPoint]]) -> list[float]:
    """Each replica's live memory slope, MB per 100,000 requests: least squares over its heap records (memory in use
    after a full collection, against the requests done); empty when a replica has fewer than 3 records."""
    slopes = []
    for points in heap:
        if len(points) < 3:
            return []
        spread = _spread([float(p.requests) for p in points])
        if spread <= 0:
            return []
        slopes.append(_covariance([(float(p.requests), p.live_mb) for p in points]) / spread * 100_000)
    return slopes


def live_memory_lines(heap: Sequence[Sequence[HeapPoint]]) -> list[str]:
    """What each replica holds in use, recorded after the last fault settled: growth per request would be here,
    whereas RSS also keeps what the allocators once needed (live, or cycles waiting for the collector)."""
    slopes = live_slopes(heap)
    if not slopes:
        return ["- Live memory: too few heap records to fit a slope (a run cut short?)."]
    lines = [
        "- Live memory (`benchmarks.soak.heap`: each replica, on a signal, collects in full and reads CPython's and "
        "malloc's bytes in use; recorded at "
        + ", ".join(f"{p.requests}" for p in heap[0])
        + " requests, from after the provider kill settled to the end): "
        + "; ".join(
            f"replica {i} {points[0].live_mb:.2f} → {points[-1].live_mb:.2f} MB, "
            f"{points[0].objects} → {points[-1].objects} gc-tracked objects, "
            f"{min(p.freed for p in points)}–{max(p.freed for p in points)} objects freed per collection"
            for i, points in enumerate(heap)
        )
        + "."
    ]
    lines.append(
        "- Live memory slope (least squares over the records): "
        + ", ".join(f"replica {i} {s:+.2f} MB" for i, s in enumerate(slopes))
        + " per 100,000 requests. The streams in flight make a record vary by about ±0.4 MB "
        "(benchmarks/faults_notes.md), so over the last quarter of an 80,000-request run this reads a leak of "
        "several MB per 100,000 requests, not one of 1 MB: the bound is judged on RSS above."
    )
    return lines


def rss_slopes(
    rss: list[tuple[float, list[float]]], requests: int, wall_s: float, steps: Sequence[float] = ()
) -> list[float]:
    """Each replica's RSS slope in MB per 100,000 requests, fitted over the run's second half.

    Only samples past the middle of the run and past the stats window's filling count (the window's
    slices are meant to grow until then); empty when fewer than 3 samples remain. ``steps``: times of
    events that move memory once (a provider killed: its connections, its streams' recoveries): the
    slope is fitted on each side of them with one slope and an intercept per side, so a step is not
    read as growth per request.
    """
    if not rss or requests <= 0 or wall_s <= 0:
        return []
    end = rss[-1][0]
    late = [(t, values) for t, values in rss if t >= max(end / 2, WINDOW_S + 10)]
    if len(late) < 3:
        late = [(t, values) for t, values in rss if t >= end / 2]
    if len(late) < 3:
        return []
    cuts = sorted(step for step in steps if late[0][0] < step <= late[-1][0])
    sides: list[list[tuple[float, list[float]]]] = [[] for _ in range(len(cuts) + 1)]
    for t, values in late:
        sides[sum(t >= cut for cut in cuts)].append((t, values))
    sides = [side for side in sides if len(side) >= 2]
    spread = sum(_spread([t for t, _ in side]) for side in sides)
    if spread <= 0:
        return []
    per_request_s = wall_s / requests
    slopes = []
    for replica in range(len(late[0][1])):
        covariance = sum(_covariance([(t, v[replica]) for t, v in side]) for side in sides)
        slopes.append(covariance / spread * per_request_s * 100_000)
    return slopes


def _spread(times: list[float]) -> float:
    mean = sum(times) / len(times)
    return sum((t - mean) ** 2 for t in times)


def _covariance(points: list[tuple[float, float]]) -> float:
    mean_t = sum(t for t, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    return sum((t - mean_t) * (v - mean_v) for t, v in points)


def memory_summary(observed: Watch) -> str:
    """RSS growth once the stats window is full (its slices are the one thing meant to grow until then)."""
    if not observed.rss:
        return ""
    full = [(t, values) for t, values in observed.rss if t >= WINDOW_S + 10]
    baseline_t, baseline = full[0] if full else observed.rss[len(observed.rss) // 5]
    end_t, last = observed.rss[-1]
    first = observed.rss[0][1]
    parts = [
        f"replica {i} {first[i]:.0f} MB at the start, {baseline[i]:.1f} MB at {baseline_t:.0f} s, "
        f"{last[i]:.1f} MB at {end_t:.0f} s (**{last[i] - baseline[i]:+.1f} MB**)"
        for i in range(len(last))
    ]
    why = "the stats window being full" if full else "20% into a run shorter than the stats window"
    return "; ".join(parts) + f" (from {baseline_t:.0f} s, {why}, to the end)."
