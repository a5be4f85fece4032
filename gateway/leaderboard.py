"""Rows of the live leaderboard: one per (model, deployment), from a stats snapshot and the config.

The same rows feed ``GET /v1/gateway/stats`` (JSON), ``gateway stats`` (table, JSON, CSV) and the
dashboard. Percentiles follow DESIGN.md: TTFT and end-to-end are upper tails; for tokens per
second, "p95" and "p99" are *floors* (the speed 95% / 99% of responses reached at least, i.e.
the 5th / 1st percentile). Rows are grouped by model and sorted fastest first; ``Δ vs fastest``
compares each deployment's median speed with the fastest of the same model.

Ranking rests on complete answers only. A race's drained loser is read for its first tokens and
then cut off: its tokens/s covers the start of a stream, and it has no end-to-end time and no say
in the success rate. A row whose speed rests on fewer than ``MIN_RANKED_ANSWERS`` complete answers
is *thin*: its figures are shown, with ``answered`` beside them, but it is never crowned fastest,
has no ``Δ vs fastest``, and sorts after the ranked rows of its model (``ranked`` says which).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from gateway.config import ModelConfig
from gateway.samples import Outcome
from gateway.stats import DeploymentSummary, Metric, StatsSnapshot, StoreHealth
from gateway.tables import format_table

InFlightCounts = Callable[[str, str], int]
"""(model, deployment) → requests in flight there now. The router owns these counts."""


MIN_RANKED_ANSWERS = 5
"""Complete answers with a measured speed a deployment needs before its speed is compared with others'."""


def no_in_flight(model: str, deployment: str) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class LeaderboardRow:
    """One deployment's window. None means no sample measured it (never a zero stand-in)."""

    model: str
    deployment: str
    provider: str | None
    samples: int
    success_rate: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    tokens_per_s_p50: float | None
    tokens_per_s_p95_floor: float | None
    tokens_per_s_p99_floor: float | None
    tokens_per_s_vs_fastest: float | None
    """Median speed relative to the model's fastest median: 0.0 for the fastest, -0.4 for 40% slower."""
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    """End-to-end of complete answers, as TTFT: p50 / p95 / p99 upper tails."""
    e2e_p99_s: float | None
    price_in: float | None
    """USD per 1M prompt tokens (None when the deployment is not in the config at hand)."""
    price_out: float | None
    in_flight: int
    apis: tuple[str, ...] = ()
    """The APIs the deployment serves (empty when it is not in the config at hand)."""
    cache_hit_ratio: float | None = None
    """Cached ÷ prompt tokens of its answers whose provider reports cached tokens (None: none did)."""
    warm_ttft_p50_s: float | None = None
    """First token when most of the prompt was cached, and when it was not."""
    cold_ttft_p50_s: float | None = None
    prefill_tokens_per_s_p50: float | None = None
    """Uncached prompt tokens per second of first token (long uncached prompts only)."""
    price_cached_in: float | None = None
    valid_rate: float | None = None
    """Valid ÷ judged answers (``gateway.quality``), every request kind together (None: none judged)."""
    valid_rate_tools: float | None = None
    """The same for tool-using requests, JSON-mode requests and plain ones: a deployment is routed by its kind's."""
    valid_rate_json: float | None = None
    valid_rate_plain: float | None = None
    invalid_reason: str | None = None
    """The most frequent reason its answers were invalid (None: none was)."""
    judged: int | None = None
    """Of ``samples``, the attempts that say something of the provider: ``success_rate``'s denominator (client
    cancellations, the request's own 4xx and streams its deadline cut are left out). None in documents of gateways
    before it."""
    answered: int | None = None
    """Complete answers whose speed was measured (at least: a speed sample of an attempt that did not answer
    in full, such as a drained race loser, is not counted). None in documents of gateways before it."""
    ranked: bool = False
    """Whether ``answered`` reaches ``MIN_RANKED_ANSWERS``: only ranked rows are compared (``Δ vs fastest``)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LeaderboardRow:
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["apis"] = tuple(values.get("apis") or ())
        # A gateway before ``ranked`` compared every measured row.
        values["ranked"] = bool(data.get("ranked", data.get("tokens_per_s_vs_fastest") is not None))
        return cls(**values)


def _row(
    model: str, deployment: str, snapshot: StatsSnapshot, config: ModelConfig | None, in_flight: InFlightCounts
) -> LeaderboardRow:
    summary = snapshot.get(model, deployment)
    answered = answered_speeds(summary)
    declared = next((d for d in config.deployments if d.name == deployment), None) if config else None

    def q(metric: Metric, quantile: float) -> float | None:
        return None if summary is None else summary.quantile(metric, quantile)

    return LeaderboardRow(
        model=model,
        deployment=deployment,
        provider=declared.provider if declared else None,
        samples=summary.samples if summary else 0,
        success_rate=summary.success_rate() if summary else None,
        ttft_p50_s=q("ttft_s", 0.50),
        ttft_p95_s=q("ttft_s", 0.95),
        ttft_p99_s=q("ttft_s", 0.99),
        tokens_per_s_p50=q("tokens_per_s", 0.50),
        tokens_per_s_p95_floor=q("tokens_per_s", 0.05),
        tokens_per_s_p99_floor=q("tokens_per_s", 0.01),
        tokens_per_s_vs_fastest=None,
        e2e_p50_s=q("e2e_s", 0.50),
        e2e_p95_s=q("e2e_s", 0.95),
        e2e_p99_s=q("e2e_s", 0.99),
        price_in=declared.price_in if declared else None,
        price_out=declared.price_out if declared else None,
        in_flight=in_flight(model, deployment),
        apis=tuple(declared.apis) if declared else (),
        cache_hit_ratio=summary.hit_ratio() if summary else None,
        warm_ttft_p50_s=q("warm_ttft_s", 0.50),
        cold_ttft_p50_s=q("cold_ttft_s", 0.50),
        prefill_tokens_per_s_p50=q("prefill_tokens_per_s", 0.50),
        price_cached_in=declared.price_cached_in if declared else None,
        valid_rate=summary.valid_rate() if summary else None,
        valid_rate_tools=summary.valid_rate("tools") if summary else None,
        valid_rate_json=summary.valid_rate("json") if summary else None,
        valid_rate_plain=summary.valid_rate("plain") if summary else None,
        invalid_reason=summary.top_reason() if summary else None,
        judged=summary.attempts if summary else 0,
        answered=answered,
        ranked=answered >= MIN_RANKED_ANSWERS,
    )


CUT_OFF_OUTCOMES: tuple[Outcome, ...] = ("client_cancelled", "broken_stream", "timeout", "deadline")
"""Attempts that may have streamed for a while and then stopped: a drained race loser, a stream that broke, timed
out or was cut at the request's deadline. A speed they gave covers the start of a stream only (censored)."""


def answered_speeds(summary: DeploymentSummary | None) -> int:
    """Speed samples that certainly came from complete answers: the window's histograms do not say which
    attempt gave a speed, so every attempt that may have been cut off is taken to have given one."""
    if summary is None:
        return 0
    outcomes = summary.outcomes
    cut_off = sum(outcomes.get(outcome, 0) for outcome in CUT_OFF_OUTCOMES)
    return max(0, min(outcomes.get("ok", 0), summary.count("tokens_per_s") - cut_off))


def _speed_key(row: LeaderboardRow) -> tuple[bool, bool, float, str]:
    speed = row.tokens_per_s_p50
    return (not row.ranked, speed is None, -(speed or 0.0), row.deployment)


def leaderboard(
    snapshot: StatsSnapshot, models: Sequence[ModelConfig] = (), in_flight: InFlightCounts = no_in_flight
) -> list[LeaderboardRow]:
    """Every configured deployment (measured or not) and every measured one, fastest first per model: the ranked
    ones, then the thin ones, then those without a speed (see the module docstring).

    Models come in config order, then any the snapshot holds that the config does not (e.g. read
    from a Redis shared with replicas running another config), by name.
    """
    pairs: dict[str, list[str]] = {m.name: [d.name for d in m.deployments] for m in models}
    for model, deployment in sorted(snapshot.summaries):
        names = pairs.setdefault(model, [])
        if deployment not in names:
            names.append(deployment)
    configs = {m.name: m for m in models}
    rows: list[LeaderboardRow] = []
    for model, deployments in pairs.items():
        group = [_row(model, d, snapshot, configs.get(model), in_flight) for d in deployments]
        group.sort(key=_speed_key)
        fastest = group[0].tokens_per_s_p50 if group and group[0].ranked else None
        for row in group:
            speed = row.tokens_per_s_p50 if row.ranked else None
            vs = None if speed is None or not fastest else speed / fastest - 1.0
            rows.append(replace(row, tokens_per_s_vs_fastest=vs))
    return rows


def leaderboard_json(
    rows: Sequence[LeaderboardRow], *, window_s: int, taken_at: float, backend: str, health: StoreHealth
) -> dict[str, Any]:
    """The body of ``GET /v1/gateway/stats``."""
    return {
        "object": "gateway.stats",
        "window_s": window_s,
        "taken_at": taken_at,
        "store": {
            "backend": backend,
            "degraded": health.degraded,
            "reason": health.reason,
            "dropped_samples": health.dropped_samples,
            "buffered_samples": health.buffered_samples,
        },
        "data": [asdict(row) for row in rows],
    }


# -- rendering for the terminal ------------------------------------------------------------------

TABLE_HEADER = (
    "Model",
    "Deployment",
    "Tokens/s p50",
    "Δ vs fastest p50",
    "Tokens/s p95 floor",
    "Tokens/s p99 floor",
    "TTFT p95",
    "End-to-end p99",
    "Success",
    "Samples",
    "In flight",
    "$/1M in",
    "$/1M out",
    "Cache hit · warm/cold TTFT",
    "Valid answers",
)
"""The first seven measured columns follow a public provider leaderboard's order; the rest follow."""


def _speed(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:,.0f} ms" if value < 1.0 else f"{value:,.2f} s"


def _share(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _price(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def is_thin(row: LeaderboardRow) -> bool:
    """A speed is shown but too few complete answers back it to compare it (see the module docstring)."""
    return row.tokens_per_s_p50 is not None and not row.ranked


def vs_cell(row: LeaderboardRow) -> str:
    """``fastest``, ``-40.0%``, or ``thin (2)``: a thin row's count of complete answers instead of a comparison."""
    vs = row.tokens_per_s_vs_fastest
    if is_thin(row):
        return f"thin ({row.answered or 0})"
    return "fastest" if vs == 0.0 else _share(vs, signed=True)


THIN_NOTE = (
    f"thin (n): a speed from n < {MIN_RANKED_ANSWERS} complete answers (e.g. race losers cut off early), not ranked"
)
"""Printed under a table that holds a thin row."""


def table_cells(row: LeaderboardRow) -> list[str]:
    return [
        row.model,
        row.deployment,
        _speed(row.tokens_per_s_p50),
        vs_cell(row),
        _speed(row.tokens_per_s_p95_floor),
        _speed(row.tokens_per_s_p99_floor),
        _seconds(row.ttft_p95_s),
        _seconds(row.e2e_p99_s),
        _share(row.success_rate),
        str(row.samples),
        str(row.in_flight),
        _price(row.price_in),
        _price(row.price_out),
        cache_cell(row),
        valid_cell(row),
    ]


def valid_cell(row: LeaderboardRow, width: int = 40) -> str:
    """``93.0% tool_args_not_json``: the valid share of judged answers and the top reason (``-``: none judged);
    the kinds apart when they differ (``tools 70.0%``), most broken first."""
    if row.valid_rate is None:
        return "-"
    cell = _share(row.valid_rate)
    rates = {"tools": row.valid_rate_tools, "json": row.valid_rate_json, "plain": row.valid_rate_plain}
    judged = {kind: rate for kind, rate in rates.items() if rate is not None}
    worst = min(judged, key=lambda kind: judged[kind], default=None)
    if len(judged) > 1 and worst is not None and judged[worst] < row.valid_rate:
        cell += f" ({worst} {_share(judged[worst])})"  # the kinds differ: the one it breaks
    if row.invalid_reason:
        cell += f" {row.invalid_reason}"
    return cell if len(cell) <= width else cell[: width - 1] + "…"


def cache_cell(row: LeaderboardRow) -> str:
    """``85% · 40 ms/1.20 s``: the hit ratio, then the warm and cold median first tokens (``-``: not measured)."""
    if row.cache_hit_ratio is None and row.warm_ttft_p50_s is None and row.cold_ttft_p50_s is None:
        return "-"
    return f"{_share(row.cache_hit_ratio)} · {_seconds(row.warm_ttft_p50_s)}/{_seconds(row.cold_ttft_p50_s)}"


def render_table(rows: Sequence[LeaderboardRow]) -> str:
    """Every column (``gateway stats --wide``): about 170 characters wide."""
    table = format_table(TABLE_HEADER, [table_cells(row) for row in rows], numeric_from=2)
    return table + f"\n\n{THIN_NOTE}" if any(is_thin(row) for row in rows) else table


COMPACT_HEADER = (
    "Deployment",
    "Tok/s p50",
    "vs fastest",
    "TTFT p95",
    "E2E p99",
    "Success",
    "Samples",
    "Valid answers",
)
"""``gateway stats``'s default: the leaderboard's order, without the floors, load and prices (``--wide`` has them);
valid answers last, with their top reason cut to fit."""


def render_compact(rows: Sequence[LeaderboardRow]) -> str:
    """One block per model (its name as a heading), so that the table fits a 100-column terminal."""
    blocks: list[str] = []
    grouped: dict[str, list[LeaderboardRow]] = {}
    for row in rows:
        grouped.setdefault(row.model, []).append(row)
    for model, group in grouped.items():
        cells = []
        for row in group:
            full = table_cells(row)
            valid = valid_cell(row, width=16)
            cells.append([row.deployment, full[2], full[3], full[6], full[7], full[8], full[9], valid])
        blocks.append(f"{model}\n" + format_table(COMPACT_HEADER, cells, numeric_from=1))
    if any(is_thin(row) for row in rows):
        blocks.append(THIN_NOTE)
    return "\n\n".join(blocks)


def render_csv(rows: Sequence[LeaderboardRow]) -> str:
    """Raw values (seconds, tokens/s, shares as fractions); an empty cell means not measured."""
    out = io.StringIO()
    names = [f.name for f in fields(LeaderboardRow)]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow(["" if getattr(row, n) is None else getattr(row, n) for n in names])
    return out.getvalue()
