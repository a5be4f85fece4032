"""The benchmark's summaries, tables and files (``gateway.bench.progress`` draws the progress).

Percentiles are nearest-rank over *every* request sent to a target, so that timeouts and
errors stay in the denominator, as the public leaderboards count them:

- tokens/s p50 and the p95/p99 *floors* (the speed 50% / 95% / 99% of requests reached at
  least): a failed request reached no speed and ranks as 0; a complete answer under 2 tokens
  has no speed at all and is left out;
- TTFT p95: a request that never produced a first token ranks above every measured one;
- end-to-end p99: any request that did not complete ranks above every complete one.

When a percentile lands on a failed request, it is reported as ``None`` ("fail" in the table):
that provider cannot promise that percentile at all.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import tables
from gateway.bench.runner import BenchSettings, BenchTarget, RequestResult
from gateway.leaderboard import MIN_RANKED_ANSWERS


def _rank(q: float, n: int) -> int:
    # Rounded first: 0.05 * 20 is 1.0000000000000002 in binary floating point, and must be rank 1.
    return max(1, math.ceil(round(q * n, 9)))


def upper_quantile(values: Sequence[float], failures: int, q: float) -> float | None:
    """The nearest-rank ``q`` quantile with ``failures`` ranked above every value; None if one is hit."""
    n = len(values) + failures
    if n == 0:
        return None
    rank = _rank(q, n)
    ordered = sorted(values)
    return ordered[rank - 1] if rank <= len(ordered) else None


def floor_quantile(values: Sequence[float], failures: int, q: float) -> float | None:
    """The nearest-rank lower ``q`` quantile (``q=0.05``: the p95 floor) with ``failures`` ranked as 0."""
    n = len(values) + failures
    if n == 0:
        return None
    rank = _rank(q, n)
    if rank <= failures:
        return 0.0
    return sorted(values)[rank - failures - 1]


@dataclass(frozen=True, slots=True)
class TargetSummary:
    target: str
    kind: str
    base_url: str
    model: str
    requests: int
    ok: int
    success_rate: float | None
    tps_p50: float | None
    tps_p95_floor: float | None
    tps_p99_floor: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    delta_vs_fastest: float | None = None
    """Tokens/s p50 relative to the fastest target's (0.0 for the fastest, -0.4 for 40% slower)."""


def summarize_target(target: BenchTarget, results: Sequence[RequestResult]) -> TargetSummary:
    mine = [r for r in results if r.target == target.name]
    ok = [r for r in mine if r.outcome == "ok"]
    speeds = [r.tokens_per_s for r in ok if r.tokens_per_s is not None]
    failed = len(mine) - len(ok)
    ttfts = [r.ttft_s for r in mine if r.ttft_s is not None]
    no_first_token = len(mine) - len(ttfts)
    e2es = [r.e2e_s for r in ok if r.e2e_s is not None]
    incomplete = len(mine) - len(e2es)
    return TargetSummary(
        target=target.name,
        kind=target.kind,
        base_url=target.base_url,
        model=target.routed_model,
        requests=len(mine),
        ok=len(ok),
        success_rate=len(ok) / len(mine) if mine else None,
        tps_p50=floor_quantile(speeds, failed, 0.50),
        tps_p95_floor=floor_quantile(speeds, failed, 0.05),
        tps_p99_floor=floor_quantile(speeds, failed, 0.01),
        ttft_p50_s=upper_quantile(ttfts, no_first_token, 0.50),
        ttft_p95_s=upper_quantile(ttfts, no_first_token, 0.95),
        e2e_p50_s=upper_quantile(e2es, incomplete, 0.50),
        e2e_p99_s=upper_quantile(e2es, incomplete, 0.99),
    )


def summarize(
    targets: Sequence[BenchTarget], results: Sequence[RequestResult], min_answers: int = 0
) -> list[TargetSummary]:
    """One summary per target, fastest (tokens/s p50) first, each with its distance to the fastest; a target with
    fewer than ``min_answers`` complete answers is too thin to compare (as on the leaderboard): after the others,
    with no distance."""
    summaries = [summarize_target(target, results) for target in targets]
    summaries.sort(key=lambda s: (s.ok >= min_answers, -1.0 if s.tps_p50 is None else s.tps_p50), reverse=True)
    fastest = summaries[0].tps_p50 if summaries and summaries[0].ok >= min_answers else None
    if not fastest:
        return summaries
    return [
        dataclasses.replace(
            s, delta_vs_fastest=None if s.tps_p50 is None or s.ok < min_answers else s.tps_p50 / fastest - 1
        )
        for s in summaries
    ]


NO_PROVIDER = "(no provider)"
"""Where a gateway's answer without ``x-gateway-provider`` is counted (no provider could answer)."""


def summarize_by_provider(targets: Sequence[BenchTarget], results: Sequence[RequestResult]) -> list[TargetSummary]:
    """Each gateway target split by the provider that served each request (``x-gateway-provider``).

    Rows are named ``<target> via <provider>`` and ranked, fastest first, within their target: what
    the gateway's routing got from each provider it chose, measured as the client saw it. The routing spreads
    requests unevenly: a provider with fewer than ``MIN_RANKED_ANSWERS`` complete answers is shown, not ranked.
    """
    rows: list[TargetSummary] = []
    for target in targets:
        if target.kind != "gateway":
            continue
        mine = [r for r in results if r.target == target.name]
        providers = sorted({r.served_by or NO_PROVIDER for r in mine})
        parts = [dataclasses.replace(target, name=f"{target.name} via {p}") for p in providers]
        relabelled = [dataclasses.replace(r, target=f"{target.name} via {r.served_by or NO_PROVIDER}") for r in mine]
        rows.extend(summarize(parts, relabelled, MIN_RANKED_ANSWERS))
    return rows


TABLE_HEADER = (
    "Target",
    "Tokens/s p50",
    "Δ vs fastest",
    "Tokens/s p95 floor",
    "Tokens/s p99 floor",
    "TTFT p95",
    "End-to-end p99",
    "Success %",
    "Requests",
)


def _speed(value: float | None) -> str:
    # A speed floor that lands on a failure is 0.0, not None: None means no answer had two tokens.
    return "-" if value is None else f"{value:.1f}"


def _seconds(value: float | None) -> str:
    return "fail" if value is None else f"{value:.2f}s"


def _delta(value: float | None) -> str:
    if value is None:
        return "-"
    return "fastest" if value == 0 else f"{value:+.0%}"


def table_rows(summaries: Sequence[TargetSummary]) -> list[list[str]]:
    return [
        [
            s.target,
            _speed(s.tps_p50),
            _delta(s.delta_vs_fastest),
            _speed(s.tps_p95_floor),
            _speed(s.tps_p99_floor),
            _seconds(s.ttft_p95_s),
            _seconds(s.e2e_p99_s),
            "-" if s.success_rate is None else f"{100 * s.success_rate:.1f}",
            str(s.requests),
        ]
        for s in summaries
    ]


def format_table(summaries: Sequence[TargetSummary]) -> str:
    """The summaries as an aligned text table: names left, numbers right."""
    return tables.format_table(TABLE_HEADER, table_rows(summaries), numeric_from=1)


def write_outputs(
    prefix: str,
    *,
    settings: BenchSettings,
    prompts_source: str,
    tokenizer: str,
    summaries: Sequence[TargetSummary],
    results: Sequence[RequestResult],
    by_provider: Sequence[TargetSummary] = (),
) -> list[Path]:
    """``PREFIX.json`` (settings, summaries, every request), ``PREFIX.csv`` (the table) and ``PREFIX.requests.csv``."""
    base = Path(prefix)
    if base.parent != Path("."):
        base.parent.mkdir(parents=True, exist_ok=True)
    paths = [Path(f"{prefix}.json"), Path(f"{prefix}.csv"), Path(f"{prefix}.requests.csv")]
    document: dict[str, Any] = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": {
            **dataclasses.asdict(settings),
            "stream": True,
            "temperature": 0,
            "prompts": prompts_source,
            "tokenizer": tokenizer,
        },
        "targets": [dataclasses.asdict(s) for s in summaries],
        "by_provider": [dataclasses.asdict(s) for s in by_provider],
        "requests": [dataclasses.asdict(r) for r in results],
    }
    paths[0].write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _write_csv(
        paths[1], [dataclasses.asdict(s) for s in summaries], [f.name for f in dataclasses.fields(TargetSummary)]
    )
    _write_csv(paths[2], [dataclasses.asdict(r) for r in results], [f.name for f in dataclasses.fields(RequestResult)])
    return paths


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
