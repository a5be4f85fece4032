"""Each deployment's last half hour as a sparkline: tokens/s above, first token below, one point a minute.

The points come from the stats store's history (``StatsStore.history``: every replica's samples when
the store is Redis). Each line has its own scale, from its own lowest to highest minute, since the
line says how the deployment moved, not how it compares (the table's bars do that); the title gives
the range. A minute with no sample leaves a gap. A dotted mark crosses both lines where the model's
leader changed: the deployment with the best median tokens/s that minute is not the one of the minute
before (``rank_changes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.dashboard.text import esc, seconds, speed
from gateway.leaderboard import MIN_RANKED_ANSWERS
from gateway.stats.history import BUCKET_S, SPAN_S, HistoryPoint

WIDTH, HEIGHT = 150, 42
LINE_H = 16.0
TPS_TOP, TTFT_TOP = 2.0, 24.0
"""Where each line's band starts (y, px): tokens/s above, first token below."""
LEAD_MARGIN = 1.15
"""A new leader must be this much faster than the current one that minute: minute medians of a few answers
wander by more than the gap between close deployments, and a mark at every wobble would say nothing."""


def rank_changes(history: Mapping[str, Sequence[HistoryPoint]]) -> tuple[int, ...]:
    """The minutes (their start, unix seconds) at which a model's fastest deployment changed: from the first
    minute's fastest, a deployment takes the lead when its median tokens/s beats the leader's that minute by
    ``LEAD_MARGIN`` (or the leader has none that minute and it is the fastest). As on the leaderboard, a speed on
    fewer than ``MIN_RANKED_ANSWERS`` samples that minute is too thin to compare (a history keeps no outcomes, so
    samples stand in for complete answers)."""
    minutes: dict[int, dict[str, float]] = {}
    for deployment, points in history.items():
        for p in points:
            if p.tokens_per_s_p50 is not None and p.samples >= MIN_RANKED_ANSWERS:
                minutes.setdefault(p.start, {})[deployment] = p.tokens_per_s_p50
    changes: list[int] = []
    leader: str | None = None
    for start in sorted(minutes):
        speeds = minutes[start]
        fastest = max(speeds, key=lambda name: (speeds[name], name))
        if leader is None:
            leader = fastest
        elif fastest != leader and (leader not in speeds or speeds[fastest] > speeds[leader] * LEAD_MARGIN):
            leader = fastest
            changes.append(start)
    return tuple(changes)


def _x(start: int, until: int) -> float:
    """The x of a minute: the newest minute at the right edge, thirty minutes back at the left."""
    first = until - SPAN_S + BUCKET_S
    return round((start - first) / max(SPAN_S - BUCKET_S, 1) * (WIDTH - 4) + 2, 1)


def _path(points: Sequence[tuple[int, float]], until: int, top: float, low_is_up: bool) -> str:
    """One line through ``points`` (minute start, value), its own scale; a missing minute breaks it."""
    if not points:
        return ""
    values = [v for _, v in points]
    low, high = min(values), max(values)
    span = high - low or 1.0
    parts: list[str] = []
    previous: int | None = None
    alone = False
    for start, value in points:
        share = (value - low) / span if high > low else 0.5
        y = top + (share if low_is_up else 1 - share) * LINE_H
        joined = previous is not None and start - previous == BUCKET_S
        if not joined:
            if alone:
                parts.append("l2 0")  # the minute before stood alone: a short tick, so that it shows
            alone = True
        else:
            alone = False
        parts.append(f"{'L' if joined else 'M'}{_x(start, until)} {y:.1f}")
        previous = start
    if alone:
        parts.append("l2 0")
    return " ".join(parts)


def render_sparkline(points: Sequence[HistoryPoint], changes: Sequence[int], until: int, color: str) -> str:
    """The SVG for one deployment; ``until``: the start of the newest minute (the right edge)."""
    speeds = [(p.start, p.tokens_per_s_p50) for p in points if p.tokens_per_s_p50 is not None]
    ttfts = [(p.start, p.ttft_p50_s) for p in points if p.ttft_p50_s is not None]
    if not speeds and not ttfts:
        return '<span class="muted spark-none">no streamed answer in 30 min</span>'
    title = []
    if speeds:
        low, high = min(v for _, v in speeds), max(v for _, v in speeds)
        title.append(f"tokens/s p50 per minute: {speed(low)} to {speed(high)}")
    if ttfts:
        low, high = min(v for _, v in ttfts), max(v for _, v in ttfts)
        title.append(f"first token p50 per minute: {seconds(low)} to {seconds(high)}")
    if changes:
        title.append(f"the model's fastest changed {len(changes)} time{'' if len(changes) == 1 else 's'}")
    marks = "".join(
        f'<line class="rank-change" x1="{_x(c, until)}" x2="{_x(c, until)}" y1="0" y2="{HEIGHT}"/>'
        for c in changes
        if c > until - SPAN_S
    )
    return (
        f'<svg class="spark" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'style="--c:{color}"><title>{esc("; ".join(title))} (last 30 min)</title>{marks}'
        f'<path class="spark-tps" d="{_path(speeds, until, TPS_TOP, low_is_up=False)}"/>'
        f'<path class="spark-ttft" d="{_path(ttfts, until, TTFT_TOP, low_is_up=False)}"/></svg>'
    )
