"""The scatter of one model's deployments, as inline SVG: median tokens/s against median TTFT,
with the Pareto frontier drawn through the deployments nothing beats on both at once.

Sooner is left and faster is up: the best corner is the top left. An axis starts at zero
(distances then read as ratios) unless the values cluster far from it, when zero would squeeze
every point into one spot; it then starts at a round number below the smallest value, and its
first tick says so. Labels are placed beside, above or below their point where they overlap
nothing; where none fits, the point keeps its colour (the table's swatch) and its tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.dashboard.text import clip, esc, seconds, speed
from gateway.dashboard.view import DeploymentView, ModelBoard

WIDTH, HEIGHT = 400, 260
LEFT, RIGHT, TOP, BOTTOM = 52, 26, 16, 44
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
CLUSTERED = 0.4
"""An axis leaves out zero when its smallest value is above this share of its largest."""
CHAR_W, LABEL_H, POINT_R = 6.6, 12.0, 5.5
"""Estimated width of a label character and height of a label (11 px bold), radius of a point."""

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


def axis_ticks(values: Sequence[float]) -> list[float]:
    """The ticks of an axis showing ``values`` (all ≥ 0) with a little room around them."""
    low, high = min(values), max(values)
    if low <= CLUSTERED * high:
        return nice_ticks(0.0, high * 1.08 or 1.0)
    pad = (high - low) * 0.15 or high * 0.1
    return nice_ticks(max(0.0, low - pad), high + pad)


def _tick_label_s(value: float, top: float) -> str:
    if value == 0:
        return "0"
    return f"{value * 1000:g} ms" if top < 1.0 else f"{value:g} s"


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
    x_ticks = axis_ticks([_ttft(d) for d in plotted])
    y_ticks = axis_ticks([_speed(d) for d in plotted])
    (x0, x1), (y0, y1) = (x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1])

    def x(value: float) -> float:
        return LEFT + (value - x0) / (x1 - x0) * PLOT_W

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
            f"{_tick_label_s(tick, x1)}</text>"
        )
    for tick in y_ticks:
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y(tick):.1f}" x2="{LEFT + PLOT_W}" y2="{y(tick):.1f}"/>')
        label = _tick_label_speed(tick)
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{label}</text>')
    parts.append(
        f'<path class="axis" d="M{LEFT} {TOP}V{TOP + PLOT_H}H{LEFT + PLOT_W}"/>'
        f'<text class="axis-title" x="{LEFT + PLOT_W / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle">'
        "time to first token, p50 →</text>"
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


def _ttft(d: DeploymentView) -> float:
    return d.row.ttft_p50_s or 0.0


def _speed(d: DeploymentView) -> float:
    return d.row.tokens_per_s_p50 or 0.0


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(
    plotted: Sequence[DeploymentView], at: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float, str]]:
    """Label positions (x, baseline y, text-anchor) that overlap no point, label or the corner note.

    The chosen deployment and the frontier are labelled first; a label that fits nowhere is left out.
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
        gap = 14.0 if d.chosen else 9.0
        candidates: list[tuple[Box, tuple[float, float, str]]] = [
            ((cx + gap, cy - 8, cx + gap + w, cy + 4), (cx + gap, cy + 4, "start")),
            ((cx - gap - w, cy - 8, cx - gap, cy + 4), (cx - gap, cy + 4, "end")),
            ((cx - w / 2, cy - gap - LABEL_H, cx + w / 2, cy - gap), (cx, cy - gap - 2, "middle")),
            ((cx - w / 2, cy + gap, cx + w / 2, cy + gap + LABEL_H), (cx, cy + gap + LABEL_H - 2, "middle")),
        ]
        for box, spot in candidates:
            inside = box[0] >= LEFT + 2 and box[2] <= WIDTH - 2 and box[1] >= TOP and box[3] <= TOP + PLOT_H
            if inside and not any(_overlaps(box, other) for other in taken):
                taken.append(box)
                placed[name] = spot
                break
    return placed


def _point(d: DeploymentView, cx: float, cy: float, label: tuple[float, float, str] | None) -> str:
    name = d.row.deployment
    tip = f"{name}: first token {seconds(d.row.ttft_p50_s)}, {speed(d.row.tokens_per_s_p50)} tokens/s (p50)"
    if d.on_frontier:
        tip += "; on the Pareto frontier"
    kind = "on-frontier" if d.on_frontier else "dominated"
    ring = f'<circle class="chosen-ring" cx="{cx:.1f}" cy="{cy:.1f}" r="9.5"/>' if d.chosen else ""
    text = ""
    if label is not None:
        lx, ly, anchor = label
        text = f'<text class="label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{esc(clip(name, 18))}</text>'
    return (
        f'<g class="point {kind}" style="--c:{d.color}"><title>{esc(tip)}</title>{ring}'
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{POINT_R}"/>{text}</g>'
    )
