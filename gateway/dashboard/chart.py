"""The scatter of one model's deployments, as inline SVG: median tokens/s against median TTFT,
with the Pareto frontier drawn through the deployments nothing beats on both at once.

Axes start at zero (so distances read as ratios) and end at a round number above the largest
value. Sooner is left and faster is up: the best corner is the top left.
"""

from __future__ import annotations

import math

from gateway.dashboard.text import clip, esc, seconds, speed
from gateway.dashboard.view import DeploymentView, ModelBoard

WIDTH, HEIGHT = 400, 260
LEFT, RIGHT, TOP, BOTTOM = 52, 26, 16, 44
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top``, about ``count`` steps (1, 2, 2.5 or 5 × 10^k)."""
    if not top > 0:
        top = 1.0
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    steps = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(steps + 1)]


def _tick_label_s(value: float, top: float) -> str:
    if top < 1.0:
        return f"{value * 1000:g} ms" if value else "0"
    return f"{value:g} s" if value else "0"


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
    x_ticks = nice_ticks(max(_ttft(d) for d in plotted) * 1.08)
    y_ticks = nice_ticks(max(_speed(d) for d in plotted) * 1.08)
    x_top, y_top = x_ticks[-1], y_ticks[-1]

    def x(value: float) -> float:
        return LEFT + value / x_top * PLOT_W

    def y(value: float) -> float:
        return TOP + PLOT_H - value / y_top * PLOT_H

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
            f"{_tick_label_s(tick, x_top)}</text>"
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
    # Slowest first, so the points that matter most are drawn on top.
    for d in sorted(plotted, key=_speed):
        parts.append(_point(d, x(_ttft(d)), y(_speed(d))))
    parts.append("</svg>")
    return "".join(parts)


def _ttft(d: DeploymentView) -> float:
    return d.row.ttft_p50_s or 0.0


def _speed(d: DeploymentView) -> float:
    return d.row.tokens_per_s_p50 or 0.0


def _point(d: DeploymentView, cx: float, cy: float) -> str:
    name = d.row.deployment
    tip = f"{name}: first token {seconds(d.row.ttft_p50_s)}, {speed(d.row.tokens_per_s_p50)} tokens/s (p50)"
    if d.on_frontier:
        tip += "; on the Pareto frontier"
    kind = "on-frontier" if d.on_frontier else "dominated"
    ring = f'<circle class="chosen-ring" cx="{cx:.1f}" cy="{cy:.1f}" r="9.5"/>' if d.chosen else ""
    # Labels go right of the point, or left of it near the right edge.
    right = cx < LEFT + PLOT_W * 0.68
    gap = 14 if d.chosen else 9
    lx, anchor = (cx + gap, "start") if right else (cx - gap, "end")
    return (
        f'<g class="point {kind}" style="--c:{d.color}"><title>{esc(tip)}</title>{ring}'
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5.5"/>'
        f'<text class="label" x="{lx:.1f}" y="{cy + 4:.1f}" text-anchor="{anchor}">{esc(clip(name, 18))}</text></g>'
    )
