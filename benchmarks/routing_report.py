"""The routing benchmark's figures and report, computed from every request's outcome.

Kept apart from the runner so that a report can be rebuilt from saved runs (``--report-only``)
and a run on older code (``--before``) can be set beside a new one.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.routing_scenarios import SCENARIOS, Scenario

AFTER_CHANGE_S = 15.0
"""The share on the new best is counted from this long after a change on."""
SWITCH_WINDOW = 20
"""Requests in the sliding window whose share on the best tells when the router switched."""


@dataclass
class Outcome:
    """One request as the client saw it."""

    index: int
    at_s: float
    tokens: int
    best: str
    """The oracle's pick when it was sent."""
    ok: bool = False
    e2e_s: float | None = None
    ttft_s: float | None = None
    provider: str = "-"
    route: str = "-"
    attempts: int = 0
    cost_usd: float = 0.0


@dataclass
class Run:
    """One strategy's pass over a scenario's schedule."""

    scenario: str
    strategy: str
    seed: int
    outcomes: list[Outcome] = field(default_factory=list)
    probes: int | None = None
    """Requests the gateway spent on exploring, from its own count (None: not reported)."""
    seconds: float = 0.0


def save_runs(path: str, runs: Sequence[Run]) -> None:
    Path(path).write_text(json.dumps([asdict(r) for r in runs]))


def load_runs(path: str) -> list[Run]:
    runs = []
    for data in json.loads(Path(path).read_text()):
        outcomes = [Outcome(**o) for o in data.pop("outcomes")]
        runs.append(Run(**data, outcomes=outcomes))
    return runs


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Figures:
    requests: int
    failed: int
    mean_s: float
    p95_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    on_best: float
    after_change: float | None
    """Share on the best from ``AFTER_CHANGE_S`` after the first change to the end."""
    switch_s: float | None
    """Seconds from the change to the first window of requests ≥ 80% on the new best (None: never)."""
    explore: float | None
    attempts: float
    cost_per_1k: float

    @classmethod
    def of(cls, run: Run, scenario: Scenario) -> Figures:
        ok = [o for o in run.outcomes if o.ok and o.e2e_s is not None]
        times = [o.e2e_s for o in ok if o.e2e_s is not None]
        ttfts = [o.ttft_s for o in ok if o.ttft_s is not None]
        after_change = switch = None
        if scenario.changes:
            at = scenario.changes[0].at_s
            later = [o for o in ok if o.at_s >= at + AFTER_CHANGE_S]
            after_change = sum(o.provider == o.best for o in later) / max(1, len(later))
            since = [o for o in ok if o.at_s >= at]
            for i in range(max(0, len(since) - SWITCH_WINDOW + 1)):
                window = since[i : i + SWITCH_WINDOW]
                if sum(o.provider == o.best for o in window) >= 0.8 * len(window):
                    switch = window[0].at_s - at
                    break
        n = len(run.outcomes)
        if run.probes is not None:
            explore: float | None = run.probes / max(1, n)
        elif run.strategy == "gateway":
            explore = sum(o.route == "explore" for o in run.outcomes) / max(1, n)
        else:
            explore = None
        return cls(
            requests=n,
            failed=n - len(ok),
            mean_s=statistics.fmean(times) if times else float("nan"),
            p95_s=_quantile(times, 0.95),
            ttft_p50_s=_quantile(ttfts, 0.5),
            ttft_p99_s=_quantile(ttfts, 0.99),
            on_best=sum(o.provider == o.best for o in ok) / max(1, len(ok)),
            after_change=after_change,
            switch_s=switch,
            explore=explore,
            attempts=statistics.fmean(o.attempts for o in ok) if ok else float("nan"),
            cost_per_1k=sum(o.cost_usd for o in ok) / max(1, len(ok)) * 1000,
        )


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.0%}"


def _pooled(runs: Sequence[Run], scenario: str, strategy: str) -> list[Run]:
    return [r for r in runs if r.scenario == scenario and r.strategy == strategy]


def _regret(runs: Sequence[Run], scenario: Scenario, strategy: str) -> float | None:
    """Mean end-to-end ÷ the oracle's of the same seed − 1, averaged over seeds."""
    regrets = []
    for run in _pooled(runs, scenario.name, strategy):
        oracle = next((r for r in _pooled(runs, scenario.name, "oracle") if r.seed == run.seed), None)
        if oracle is None:
            continue
        mine, best = Figures.of(run, scenario).mean_s, Figures.of(oracle, scenario).mean_s
        regrets.append(mine / best - 1)
    return statistics.fmean(regrets) if regrets else None


def _row(label: str, runs: Sequence[Run], scenario: Scenario, strategy: str) -> str | None:
    pooled = _pooled(runs, scenario.name, strategy)
    if not pooled:
        return None
    figures = [Figures.of(r, scenario) for r in pooled]

    def mean(values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None and not math.isnan(v)]
        return statistics.fmean(known) if known else None

    switch = [f.switch_s for f in figures]
    switch_text = "-" if not scenario.changes else ("never" if None in switch else f"{mean(switch):.1f} s")
    regret = _pct(_regret(runs, scenario, strategy), True)
    ttft = f"{mean([f.ttft_p50_s for f in figures]):.2f} / {mean([f.ttft_p99_s for f in figures]):.2f}"
    cells = [
        scenario.name,
        label,
        f"{mean([f.mean_s for f in figures]):.3f}",
        regret,
        f"{mean([f.p95_s for f in figures]):.2f}",
        ttft,
        _pct(mean([f.on_best for f in figures])),
        _pct(mean([f.after_change for f in figures])),
        switch_text,
        _pct(mean([f.explore for f in figures])),
        f"{mean([f.attempts for f in figures]):.2f}",
        str(sum(f.failed for f in figures)),
        f"{mean([f.cost_per_1k for f in figures]):.4f}",
    ]
    return "| " + " | ".join(cells) + " |"


def _summary(runs: Sequence[Run], before: Sequence[Run] | None, scenarios: Sequence[Scenario]) -> list[str]:
    lines = [
        "| behaviour | scenario | regret before | regret after | target | on new best from +15 s | explore | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in scenarios:
        gateway = [Figures.of(r, scenario) for r in _pooled(runs, scenario.name, "gateway")]
        if not gateway:
            continue
        target = "≤ 5%" if scenario.name == "stable" else "≤ 10%"
        changed = [f.after_change for f in gateway if f.after_change is not None]
        explore = [f.explore for f in gateway if f.explore is not None]
        lines.append(
            f"| {scenario.behaviour} | {scenario.name} | {_pct(_regret(before or [], scenario, 'gateway'), True)} "
            f"| {_pct(_regret(runs, scenario, 'gateway'), True)} | {target} "
            f"| {_pct(statistics.fmean(changed)) if changed else '-'} "
            f"| {_pct(statistics.fmean(explore)) if explore else '-'} | {sum(f.failed for f in gateway)} |"
        )
    return lines


def report(runs: Sequence[Run], before: Sequence[Run] | None, *, command: str, seconds: float) -> str:
    names = {r.scenario for r in runs}
    scenarios = [s for s in SCENARIOS if s.name in names]
    seeds = sorted({r.seed for r in runs})
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Routing benchmark: the default policy against an oracle, round-robin and LiteLLM",
        "",
        f"- Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- Machine: {platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()} (shared with other jobs: CPU noise is expected)",
        f"- Command: `{command}` ({seconds:.0f} s); seeds {', '.join(map(str, seeds))}",
        "- Each scenario: a fresh gateway with its defaults (policy `balanced`, 300 s stats window), fake",
        "  providers in real time (no scaling), Poisson arrivals of streamed requests at 4/s, every strategy",
        "  on the same schedule.",
        "- regret: mean end-to-end ÷ the oracle's in the same run − 1. on best: requests served by the provider",
        f"  the oracle would pick at that moment; after +{AFTER_CHANGE_S:g} s: the same, from that long after",
        f"  the change to the end; switch: from the change to the first {SWITCH_WINDOW} requests in a row ≥ 80%",
        "  on the new best.",
        "  explore: requests the gateway spent measuring (its own count; probes that race the leader included,",
        "  the cold start, before anything is measured, not).",
        "",
        "## Targets (default policy)",
        "",
        *_summary(runs, before, scenarios),
        "",
        "## Every strategy",
        "",
        "| scenario | strategy | mean s | regret | p95 s | TTFT p50 / p99 s | on best | after +15 s | switch "
        "| explore | attempts/req | failed | cost $/1k |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario in scenarios:
        if before:
            row = _row("gateway (before)", before, scenario, "gateway")
            if row:
                lines.append(row)
        for strategy in ("gateway", "oracle", "round-robin", "litellm"):
            row = _row(strategy, runs, scenario, strategy)
            if row:
                lines.append(row)
    lines += ["", "Scenarios:", ""]
    for scenario in scenarios:
        lines.append(f"- **{scenario.name}** ({scenario.behaviour}): {scenario.description}.")
    notes = Path(__file__).with_name("routing_notes.md")
    if notes.exists():  # its opening ("Reading the figures"); the history stays in the notes, not copied here
        opening = notes.read_text().split("\n## ", 1)[0].rstrip()
        lines += ["", opening, "", "How the figures got here: `benchmarks/routing_notes.md`."]
    return "\n".join(lines) + "\n"
