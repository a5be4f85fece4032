"""The dashboard as one self-contained HTML document: inline CSS, inline SVG, one small script.

``render_page`` builds the whole document; the part that changes (``<main id="board">``) is
what the script swaps in when it re-fetches the page every few seconds. Without JavaScript a
``<noscript>`` meta refresh reloads the page instead. Nothing is loaded from elsewhere, so the
page works offline and under a Content-Security-Policy that allows only its own nonce'd script.
"""

from __future__ import annotations

import json
import time
from importlib import resources

from gateway.dashboard.chart import render_scatter
from gateway.dashboard.spark import render_sparkline
from gateway.dashboard.text import NO_SAMPLES, duration, esc, percent, plural, price, seconds, speed
from gateway.dashboard.view import PALETTE, BoardRow, DashboardView, ModelBoard
from gateway.dashboard.why import render_why
from gateway.leaderboard import MIN_RANKED_ANSWERS, LeaderboardRow, cache_cell, is_thin

REFRESH_S = 3
_STYLE = resources.files(__package__).joinpath("page.css").read_text(encoding="utf-8")
_SCRIPT = resources.files(__package__).joinpath("page.js").read_text(encoding="utf-8")


def render_page(view: DashboardView, *, nonce: str, refresh_s: int = REFRESH_S) -> str:
    """The full document. ``nonce`` must match the response's Content-Security-Policy."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>gateway · live leaderboard</title><link rel="icon" href="data:,">'
        f'<noscript><meta http-equiv="refresh" content="{refresh_s}"></noscript>'
        f"<style>{_STYLE}</style></head><body>"
        '<header class="top"><div class="brand"><span class="logo" aria-hidden="true"></span>gateway'
        '<span class="sub">live leaderboard</span></div>'
        f'<div id="live" class="live" data-every="{refresh_s}"><span class="dot"></span>'
        f'<span id="live-text">live · every {refresh_s} s</span></div></header>'
        f"{render_board(view)}"
        f'<script nonce="{esc(nonce)}">{_SCRIPT}</script></body></html>'
    )


def render_board(view: DashboardView) -> str:
    """``<main id="board">``: status, then the empty state or one card per model, then the legend."""
    parts = ['<main id="board">', _status(view)]
    if view.health.degraded:
        reason = view.health.reason or "the shared stats backend is unreachable"
        parts.append(
            f'<div class="banner">Stats backend degraded: {esc(reason)}. This replica ranks on its own '
            "samples until the backend is back; other replicas' traffic is missing from these figures.</div>"
        )
    if view.samples == 0:
        parts.append(_empty(view))
    else:
        parts.extend(_card(board, view.window_s) for board in view.boards)
        parts.append(_LEGEND)
    parts.append("</main>")
    return "".join(parts)


def _status(view: DashboardView) -> str:
    store = "degraded" if view.health.degraded else "healthy"
    updated = time.strftime("%H:%M:%S", time.localtime(view.taken_at)) if view.taken_at else "not yet"
    pills = [
        f'<span class="pill">window <b>{duration(view.window_s)}</b></span>',
        f'<span class="pill {store}">stats <b>{esc(view.backend)}</b> · {store}</span>',
        f'<span class="pill"><b>{view.samples:,}</b> {"sample" if view.samples == 1 else "samples"}</span>',
        f'<span class="pill">updated <b>{updated}</b></span>',
    ]
    if view.health.dropped_samples:
        pills.append(f'<span class="pill degraded"><b>{view.health.dropped_samples:,}</b> samples dropped</span>')
    return f'<section class="status">{"".join(pills)}</section>'


def _empty(view: DashboardView) -> str:
    model = json.dumps(view.boards[0].model if view.boards else "my-model")
    base = view.base_url.rstrip("/")
    auth = '  -H "Authorization: Bearer $GATEWAY_API_KEY" \\\n' if view.keys_required else ""
    curl = (
        f"curl -N {base}/v1/chat/completions \\\n{auth}"
        '  -H "Content-Type: application/json" \\\n'
        f'  -d \'{{"model": {model}, "stream": true,\n       "messages": [{{"role": "user", "content": "Hello!"}}]}}\''
    )
    configured = "".join(
        f'<li><b>{esc(board.model)}</b><span class="arrow">→</span>'
        + "".join(f'<span class="chip" style="--c:{d.color}">{esc(d.row.deployment)}</span>' for d in board.deployments)
        + "</li>"
        for board in view.boards
    )
    dots = "".join(
        f'<circle cx="{x}" cy="{y}" r="7" style="--c:{color}"/>'
        for x, y, color in ((40, 34, PALETTE[0]), (70, 52, PALETTE[1]), (98, 24, PALETTE[2]))
    )
    return (
        '<section class="empty"><div class="empty-main"><div class="empty-art" aria-hidden="true">'
        f'<svg viewBox="0 0 130 84"><path d="M14 76H124M14 76V6" class="axis"/>{dots}</svg></div>'
        "<h2>No traffic measured yet</h2>"
        "<p>This page ranks providers by what they actually do for your requests: every answer the gateway "
        f"relays is timed, and the figures cover the last {duration(view.window_s)}. To fill it:</p><ol>"
        "<li>Send requests through the gateway. Any OpenAI SDK works: point its base URL at "
        f"<code>{esc(base)}/v1</code>. Or with curl:<pre>{esc(curl)}</pre></li>"
        "<li>Or watch it route between simulated providers, with background traffic:"
        "<pre>gateway demo --traffic 5</pre></li></ol>"
        '<p class="muted">This page refreshes by itself: rows and charts appear with the first answers.</p></div>'
        f'<aside class="configured"><h3>Configured</h3><ul>{configured}</ul></aside></section>'
    )


def _card(board: ModelBoard, window_s: int) -> str:
    route = ""
    if board.choice is not None:
        color = next((d.color for d in board.deployments if d.row.deployment == board.choice.deployment), "#4b5563")
        route = (
            f'<div class="route">next request goes to <span class="chip" style="--c:{color}">'
            f'{esc(board.choice.deployment)}</span><span class="basis" title="{esc(board.choice.detail)}">'
            f"{esc(board.choice.basis)}</span></div>"
        )
    top_speed = max((d.row.tokens_per_s_p50 or 0.0 for d in board.deployments), default=0.0)
    top_ttft = max((d.row.ttft_p95_s or d.row.ttft_p50_s or 0.0 for d in board.deployments), default=0.0)
    rows = "".join(_row(d, top_speed, top_ttft, board) for d in board.deployments)
    chosen = board.choice.deployment if board.choice is not None else None
    why = render_why(board.why, board.colors, chosen) if board.why is not None else ""
    changes = len(board.rank_changes)
    flips = (
        f'<span class="meta flips">fastest changed {changes} time{"" if changes == 1 else "s"} in 30 min</span>'
        if changes
        else ""
    )
    dominated = (
        "<span>the next deployment is beaten on both medians here: it leads on its predicted time for a typical "
        "request (tails, success, price), below</span>"
        if board.next_is_dominated
        else ""
    )
    thin = (
        f"<span>◌ thin: fewer than {MIN_RANKED_ANSWERS} complete answers, not compared</span>"
        if any(is_thin(d.row) for d in board.deployments)
        else ""
    )
    return (
        f'<section class="card"><header class="card-head"><h2>{esc(board.model)}</h2>'
        f'<span class="meta">{plural(board.samples, "sample")} in {duration(window_s)}</span>{flips}{route}</header>'
        '<div class="card-body"><div class="table-wrap"><table class="rows"><thead><tr><th>Deployment</th>'
        "<th>Output speed <small>tokens/s p50 · p95 floor</small></th>"
        "<th>First token <small>TTFT p50 · p95</small></th>"
        '<th class="num">Success <small>of judged attempts</small></th>'
        '<th class="num">Valid answers <small>top reason</small></th>'
        '<th class="num">Traffic <small>share of samples</small></th>'
        "<th>Last 30 min <small>tokens/s · first token</small></th>"
        '<th class="num">Price <small>$/1M in · out</small></th>'
        '<th class="num">Prompt cache <small>hit · warm/cold TTFT</small></th></tr></thead>'
        f'<tbody>{rows}</tbody></table></div><figure class="chart">{render_scatter(board)}'
        "<figcaption><span>● Pareto frontier: nothing else is both sooner and faster (medians)</span>"
        f"<span>○ beaten on both</span>{thin}<span>time axis: log scale</span>{dominated}</figcaption></figure>"
        f"{why}</div></section>"
    )


def _width(value: float | None, top: float) -> str:
    return f"{0.0 if value is None or top <= 0 else min(100.0, value / top * 100):.1f}%"


def _success(row: LeaderboardRow) -> str:
    """The success rate and its denominator, which may be fewer than the samples: cancellations and the
    request's own 4xx say nothing of the provider, so they are counted in Traffic and not judged here."""
    judged = row.judged if row.judged is not None else row.samples
    left_out = row.samples - judged
    note = f" ({left_out} cancelled or refused)" if left_out else ""
    if row.success_rate is None:
        return f'<span class="muted">none judged</span><div class="muted">{left_out} cancelled or refused</div>'
    return f'{percent(row.success_rate)}<div class="muted">of {judged:,}{note}</div>'


def _row(d: BoardRow, top_speed: float, top_ttft: float, board: ModelBoard) -> str:
    row = d.row
    notes = []
    if d.chosen:
        notes.append('<span class="tag next">next</span>')
    if d.cheapest:
        notes.append('<span class="tag cheapest">cheapest</span>')
    if d.on_frontier and d.plotted:
        notes.append('<span class="tag on-frontier">frontier</span>')
    if row.provider and row.provider != row.deployment:
        notes.append(f"<span>on {esc(row.provider)}</span>")
    if row.in_flight:
        notes.append(f"<span>{row.in_flight} in flight</span>")
    sub = f'<div class="sub">{"".join(notes)}</div>' if notes else ""
    speed_bar = (
        f'<div class="bar speed"><span class="hi" style="width:{_width(row.tokens_per_s_p50, top_speed)}"></span>'
        f'<span class="lo" style="width:{_width(row.tokens_per_s_p95_floor, top_speed)}"></span></div>'
        f'<div class="fig"><b>{speed(row.tokens_per_s_p50)}</b> tok/s'
        f'<span class="muted"> · ≥ {speed(row.tokens_per_s_p95_floor)}</span></div>'
    )
    if is_thin(row):
        speed_bar += f'<div class="muted thin">thin: {plural(row.answered or 0, "complete answer")}, not ranked</div>'

    ttft_bar = (
        f'<div class="bar ttft"><span class="hi" style="width:{_width(row.ttft_p95_s, top_ttft)}"></span>'
        f'<span class="lo" style="width:{_width(row.ttft_p50_s, top_ttft)}"></span></div>'
        f'<div class="fig"><b>{seconds(row.ttft_p50_s)}</b>'
        f'<span class="muted"> · {seconds(row.ttft_p95_s)}</span></div>'
    )
    success_class = "" if row.success_rate is None or row.success_rate >= 0.95 else " warn"
    share = (
        f'<div class="share"><span style="width:{_width(d.share, 1.0)}"></span></div>{percent(d.share or 0.0)}'
        f'<div class="muted">{plural(row.samples, "sample")}</div>'
    )
    valid_class = "" if row.valid_rate is None or row.valid_rate >= 0.95 else " warn"
    reason = f'<div class="muted">{esc(row.invalid_reason)}</div>' if row.invalid_reason else ""
    # Success's "none judged" and Traffic's count say the rest; an unjudged deployment is no sign of a bad one.
    valid = percent(row.valid_rate) if row.valid_rate is not None else '<span class="muted">none judged</span>'
    if row.samples == 0:  # one honest cell, not four dashes that could read as zero
        measured = f'<td class="none" colspan="4">{NO_SAMPLES}</td>'
    else:
        measured = (
            f'<td class="bar-cell">{speed_bar}</td><td class="bar-cell">{ttft_bar}</td>'
            f'<td class="num{success_class}">{_success(row)}</td>'
            f'<td class="num{valid_class}">{valid}{reason}</td>'
        )
    spark = render_sparkline(d.history, board.rank_changes, board.history_until, d.color)
    return (
        f'<tr class="{"chosen" if d.chosen else ""}" style="--c:{d.color}">'
        f'<td class="name"><span class="swatch"></span><span class="dep">{esc(row.deployment)}</span>{sub}</td>'
        f'{measured}<td class="num">{share}</td><td class="spark-cell">{spark}</td>'
        f'<td class="num">{price(row.price_in)} · {price(row.price_out)}</td>'
        f'<td class="num">{esc(cache_cell(row))}</td></tr>'
    )


_LEGEND = (
    '<footer class="legend"><p><b>Output speed</b>: answer tokens per second once the answer has started '
    "(counted by the gateway with one tokenizer for every provider); the bar's dark part is the speed 95% of "
    "answers reached (the p95 floor), its full length the median. <b>First token</b>: from sending the "
    "request upstream to the first output; dark to the median, light to p95. <b>Success</b>: complete "
    "answers among the attempts judged (timeouts and errors count; cancellations and the request's own 4xx say "
    "nothing of the provider and are left out). <b>Valid answers</b>: complete answers judged "
    "usable (tool-call arguments that parse and fit the tool, JSON that parses, not empty, not cut short, not "
    "looping), with the most frequent reason for the others. <b>Traffic</b>: each deployment's share of all "
    "the model's samples in the window, those included. <b>Last 30 min</b>: tokens/s (top) and first token (bottom) "
    "medians per minute, every replica's, each line on its own scale; a dotted mark where the model's fastest "
    "deployment changed. <b>Cheapest</b>: the lowest predicted cost of a typical request at the "
    "configured prices. "
    "<b>Streamed requests only</b> have a first token and a speed; non-streamed ones count in success and "
    "traffic. <b>Prompt cache</b>: the share of prompt tokens the provider served from its cache, "
    "and the median first token when most of the prompt was cached (warm) and when it was not (cold). "
    "The chart's time axis is logarithmic: equal distances are equal ratios.</p></footer>"
)
