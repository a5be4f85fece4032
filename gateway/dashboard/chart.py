"""The scatter of one model's deployments, as inline SVG: median tokens/s against median TTFT,
with the Pareto frontier drawn through the deployments nothing beats on both at once.

Sooner is left and faster is up: the best corner is the top left. Neither axis exaggerates a
small gap: time to first token is drawn on a log axis (equal distances are equal ratios, as
latency is usually compared, from tens of milliseconds to seconds on one chart), speed on a
linear axis from zero. Both axes end on round values of a coarse series (1, 2, 5 per decade for
time; 1, 2, 2.5, 5 for speed), so that the page's refresh every few seconds does not rescale
the chart as the medians wander: a bound moves only when a value crosses one of those steps.
Every point gets its label: beside, above or below it where that overlaps nothing, else where
it overlaps least.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.dashboard.text import clip, esc, seconds, speed
from gateway.dashboard.view import BoardRow, ModelBoard
from gateway.leaderboard import is_thin

WIDTH, HEIGHT = 400, 260
LEFT, RIGHT, TOP, BOTTOM = 52, 26, 16, 44
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
CHAR_W, LABEL_H, POINT_R = 6.6, 12.0, 5.5
"""Estimated width of a label character and height of a label (11 px bold), radius of a point."""
LOG_STEPS = (1.0, 2.0, 5.0)
"""The log axis' round values within each decade."""
LINEAR_TOPS = (1.0, 2.0, 2.5, 5.0, 10.0)
"""The speed axis ends on one of these times a power of ten."""
MARGIN = 1.15
"""Room around the points on each axis, as a factor: no point sits on an axis' end."""

Box = tuple[float, float, float, float]


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round ticks from at or below ``low`` to at or above ``high``, about ``count`` steps of 1, 2, 2.5 or 5 × 10^k."""
    span = high - low if high > low else abs(high) or 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first = math.floor(low / step + 1e-9)
    last = max(math.ceil(high / step - 1e-9), first + 1)
    return [round(i * step, 10) for i in range(first, last + 1)]


def speed_ticks(values: Sequence[float]) -> list[float]:
    """Ticks of the linear speed axis: from zero to the first of ``LINEAR_TOPS`` × 10^k above the values."""
    high = max(max(values), 1e-9) * MARGIN
    magnitude = 10 ** math.floor(math.log10(high))
    top = next(m * magnitude for m in LINEAR_TOPS if m * magnitude >= high * (1 - 1e-9))
    return nice_ticks(0.0, top)


def _round_log(value: float, up: bool) -> float:
    """The nearest ``LOG_STEPS`` value at or above (``up``) or at or below ``value``."""
    magnitude = 10.0 ** math.floor(math.log10(value))
    candidates = [m * magnitude for m in (*LOG_STEPS, 10.0)] + [m * magnitude / 10 for m in LOG_STEPS]
    if up:
        return min(c for c in candidates if c >= value * (1 - 1e-9))
    return max(c for c in candidates if c <= value * (1 + 1e-9))


def log_ticks(values: Sequence[float]) -> list[float]:
    """Ticks of the log time axis: the ``LOG_STEPS`` values from below the smallest to above the largest."""
    positive = [v for v in values if v > 0] or [1e-3]
    low = _round_log(min(positive) / MARGIN, up=False)
    high = _round_log(max(positive) * MARGIN, up=True)
    ticks = []
    decade = 10 ** math.floor(math.log10(low))
    while decade <= high * (1 + 1e-9):
        ticks += [round(m * decade, 12) for m in LOG_STEPS if low * (1 - 1e-9) <= m * decade <= high * (1 + 1e-9)]
        decade *= 10
    if len(ticks) > 7:  # a span of decades: label the decades only, and the ends
        ticks = [t for t in ticks if t in (ticks[0], ticks[-1]) or math.isclose(math.log10(t) % 1, 0, abs_tol=1e-9)]
    return ticks


def _tick_label_s(value: float, top: float) -> str:
    if value == 0:
        return "0"
    return f"{value * 1000:g} ms" if value < 1.0 else f"{value:g} s"


def _tick_label_speed(value: float) -> str:
    return f"{value / 1000:g}k" if value >= 10_000 else f"{value:g}"


def render_scatter(board: ModelBoard) -> str:
    """The chart for ``board``, or a placeholder that says why there is none yet."""
    plotted = [d for d in board.deployments if d.plotted]
    if not plotted:
        return (
            '<div class="chart-empty">No speed samples yet: the chart fills as streamed answers of '
            "two or more tokens arrive.</div>"
        )
    x_ticks = log_ticks([_ttft(d) for d in plotted])
    y_ticks = speed_ticks([_speed(d) for d in plotted])
    (x0, x1), (y0, y1) = (math.log10(x_ticks[0]), math.log10(x_ticks[-1])), (y_ticks[0], y_ticks[-1])

    def x(value: float) -> float:
        return LEFT + (math.log10(max(value, 1e-6)) - x0) / (x1 - x0) * PLOT_W

    def y(value: float) -> float:
        return TOP + PLOT_H - (value - y0) / (y1 - y0) * PLOT_H

    title = f"Tokens per second against time to first token, {board.model}"
    parts = [
        f'<svg class="scatter" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}">',
        f"<title>{esc(title)}</title>",
        f'<text class="corner" x="{LEFT + 6:.1f}" y="{TOP + 12:.1f}">◤ better: sooner and faster</text>',
    ]
    for tick in x_ticks:
        parts.append(f'<line class="grid" x1="{x(tick):.1f}" y1="{TOP}" x2="{x(tick):.1f}" y2="{TOP + PLOT_H}"/>')
        parts.append(
            f'<text class="tick" x="{x(tick):.1f}" y="{TOP + PLOT_H + 15}" text-anchor="middle">'
            f"{_tick_label_s(tick, x_ticks[-1])}</text>"
        )
    for tick in y_ticks:
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y(tick):.1f}" x2="{LEFT + PLOT_W}" y2="{y(tick):.1f}"/>')
        label = _tick_label_speed(tick)
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{label}</text>')
    parts.append(
        f'<path class="axis" d="M{LEFT} {TOP}V{TOP + PLOT_H}H{LEFT + PLOT_W}"/>'
        f'<text class="axis-title" x="{LEFT + PLOT_W / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle">'
        "time to first token, p50 (log) →</text>"
        f'<text class="axis-title" transform="translate(13 {TOP + PLOT_H / 2:.1f}) rotate(-90)" '
        'text-anchor="middle">output tokens/s, p50 →</text>'
    )
    frontier = sorted((d for d in plotted if d.on_frontier), key=_ttft)
    if len(frontier) > 1:
        points = " ".join(f"{x(_ttft(d)):.1f},{y(_speed(d)):.1f}" for d in frontier)
        parts.append(f'<polyline class="frontier-line" points="{points}"/>')
    at = {d.row.deployment: (x(_ttft(d)), y(_speed(d))) for d in plotted}
    labels = place_labels(plotted, at)
    # Slowest first, so the points that matter most are drawn on top.
    for d in sorted(plotted, key=_speed):
        parts.append(_point(d, *at[d.row.deployment], labels.get(d.row.deployment)))
    parts.append("</svg>")
    return "".join(parts)


def _ttft(d: BoardRow) -> float:
    return d.row.ttft_p50_s or 0.0


def _speed(d: BoardRow) -> float:
    return d.row.tokens_per_s_p50 or 0.0


def _area(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0.0


def place_labels(
    plotted: Sequence[BoardRow], at: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float, str]]:
    """Label positions (x, baseline y, text-anchor): one for every point, never left out.

    Each label tries eight spots around its point, near then farther, and takes the first that
    overlaps no point, label or the corner note; when none is free it takes the one that
    overlaps least. The chosen deployment and the frontier are placed first.
    """
    r = POINT_R + 2
    taken: list[Box] = [(cx - r, cy - r, cx + r, cy + r) for cx, cy in at.values()]
    taken.append((LEFT, TOP, LEFT + 160, TOP + 16))  # "better: sooner and faster"
    placed: dict[str, tuple[float, float, str]] = {}
    order = sorted(plotted, key=lambda d: (not d.chosen, not d.on_frontier, -_speed(d)))
    for d in order:
        name = d.row.deployment
        cx, cy = at[name]
        w = CHAR_W * len(clip(name, 18))
        candidates: list[tuple[Box, tuple[float, float, str]]] = []
        for gap in (14.0, 26.0) if d.chosen else (9.0, 20.0):
            candidates += _spots(cx, cy, w, gap)
        inside = [c for c in candidates if _inside(c[0])] or candidates
        box, spot = min(inside, key=lambda c: sum(_area(c[0], other) for other in taken))
        taken.append(box)
        placed[name] = spot
    return placed


def _spots(cx: float, cy: float, w: float, gap: float) -> list[tuple[Box, tuple[float, float, str]]]:
    """Eight label boxes ``gap`` away from a point, with where each puts the text: right, left,
    above, below, then the four diagonals."""
    up, down, d = cy - gap, cy + gap, gap * 0.7  # a box above ends at ``up``; one below starts at ``down``
    return [
        ((cx + gap, cy - 8, cx + gap + w, cy + 4), (cx + gap, cy + 4, "start")),
        ((cx - gap - w, cy - 8, cx - gap, cy + 4), (cx - gap, cy + 4, "end")),
        ((cx - w / 2, up - LABEL_H, cx + w / 2, up), (cx, up - 2, "middle")),
        ((cx - w / 2, down, cx + w / 2, down + LABEL_H), (cx, down + LABEL_H - 2, "middle")),
        ((cx + d, up - LABEL_H, cx + d + w, up), (cx + d, up - 2, "start")),
        ((cx - d - w, up - LABEL_H, cx - d, up), (cx - d, up - 2, "end")),
        ((cx + d, down, cx + d + w, down + LABEL_H), (cx + d, down + LABEL_H - 2, "start")),
        ((cx - d - w, down, cx - d, down + LABEL_H), (cx - d, down + LABEL_H - 2, "end")),
    ]


def _inside(box: Box) -> bool:
    return box[0] >= LEFT + 2 and box[2] <= WIDTH - 2 and box[1] >= TOP and box[3] <= TOP + PLOT_H


def _point(d: BoardRow, cx: float, cy: float, label: tuple[float, float, str] | None) -> str:
    name = d.row.deployment
    tip = f"{name}: first token {seconds(d.row.ttft_p50_s)}, {speed(d.row.tokens_per_s_p50)} tokens/s (p50)"
    if d.on_frontier:
        tip += "; on the Pareto frontier"
    if is_thin(d.row):  # too few complete answers to compare: neither on the frontier nor beaten
        tip += f"; thin: {d.row.answered or 0} complete answers, not ranked"
    kind = "on-frontier" if d.on_frontier else "thin" if is_thin(d.row) else "dominated"
    ring = f'<circle class="chosen-ring" cx="{cx:.1f}" cy="{cy:.1f}" r="9.5"/>' if d.chosen else ""
    text = ""
    if label is not None:
        lx, ly, anchor = label
        text = f'<text class="label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{esc(clip(name, 18))}</text>'
    return (
        f'<g class="point {kind}" style="--c:{d.color}"><title>{esc(tip)}</title>{ring}'
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{POINT_R}"/>{text}</g>'
    )
