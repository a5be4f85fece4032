"""Leaderboard rows from fixed snapshots: the percentiles the definitions call for, floors for
speed, Δ vs the fastest of the same model, and the table and CSV renderings."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict

import pytest

from gateway.config import parse_config
from gateway.leaderboard import (
    COMPACT_HEADER,
    MIN_RANKED_ANSWERS,
    TABLE_HEADER,
    THIN_NOTE,
    LeaderboardRow,
    leaderboard,
    render_compact,
    render_csv,
    render_table,
)
from gateway.samples import DEFAULT_APIS
from gateway.stats import StatsSnapshot
from tests.support.samples import make_sample

CONFIG = parse_config(
    {
        "providers": [{"name": n, "base_url": f"http://127.0.0.1:1/{n}"} for n in ("fast", "slow", "idle")],
        "models": [
            {
                "name": "m",
                "deployments": [
                    {"provider": "slow", "model": "u", "price_in": 0.5, "price_out": 1.5},
                    {"provider": "idle", "model": "u"},
                    {"provider": "fast", "model": "u", "price_in": 1.0, "price_out": 3.0},
                ],
            }
        ],
    },
    source="test.toml",
)


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def snapshot() -> StatsSnapshot:
    samples = [make_sample(deployment="fast", tokens_per_s=100.0 + i, ttft_s=0.1 + i / 1000) for i in range(100)]
    samples += [make_sample(deployment="slow", tokens_per_s=50.0 + i, ttft_s=0.5) for i in range(100)]
    samples += [make_sample(deployment="slow", outcome="timeout", tokens_per_s=None, e2e_s=None) for _ in range(25)]
    samples += [make_sample(model="other", deployment="x", tokens_per_s=10.0)]
    return StatsSnapshot.from_samples(samples, taken_at=123.0)


def test_rows_follow_the_definitions() -> None:
    rows = leaderboard(snapshot(), CONFIG.models, in_flight=lambda model, deployment: len(deployment))
    assert [(r.model, r.deployment) for r in rows] == [("m", "fast"), ("m", "slow"), ("m", "idle"), ("other", "x")]
    fast, slow, idle, other = rows
    speeds = [100.0 + i for i in range(100)]
    assert math.isclose(fast.tokens_per_s_p50 or 0, exact(speeds, 0.5), rel_tol=0.02)
    assert math.isclose(fast.tokens_per_s_p95_floor or 0, exact(speeds, 0.05), rel_tol=0.02)  # a floor: 5th pct
    assert math.isclose(fast.tokens_per_s_p99_floor or 0, exact(speeds, 0.01), rel_tol=0.02)
    ttfts = [0.1 + i / 1000 for i in range(100)]
    assert math.isclose(fast.ttft_p99_s or 0, exact(ttfts, 0.99), rel_tol=0.02)  # an upper tail
    assert fast.tokens_per_s_vs_fastest == 0.0
    assert slow.tokens_per_s_vs_fastest is not None
    assert math.isclose(slow.tokens_per_s_vs_fastest, (slow.tokens_per_s_p50 or 0) / (fast.tokens_per_s_p50 or 1) - 1)
    assert (slow.samples, slow.judged, slow.success_rate) == (125, 125, 0.8)
    assert (fast.price_in, fast.price_out, fast.provider, fast.in_flight) == (1.0, 3.0, "fast", 4)
    assert idle == LeaderboardRow(
        "m", "idle", "idle", 0, None, None, None, None, None, None, None, None, None, None, None, 0.0, 0.0, 4,
        DEFAULT_APIS,
        judged=0,
        answered=0,
    )  # fmt: skip
    # One answer is too thin to crown "x" the fastest of its model: its speed is shown, not compared.
    assert (other.provider, other.price_in, other.tokens_per_s_vs_fastest, other.apis) == (None, None, None, ())
    assert (other.answered, other.ranked, fast.answered, fast.ranked) == (1, False, 100, True)


def test_thin_and_cut_off_speeds_are_shown_but_never_ranked() -> None:
    """A race's drained losers stream fast for their first tokens and are cut off: a few of them, with no complete
    answer, must not crown their deployment over one measured on a hundred complete answers, in any view."""
    steady = [make_sample(deployment="slow", tokens_per_s=50.0) for _ in range(100)]
    losers = [
        make_sample(deployment="fast", outcome="client_cancelled", tokens_per_s=900.0, e2e_s=None) for _ in range(3)
    ]
    few = [make_sample(deployment="idle", tokens_per_s=400.0) for _ in range(MIN_RANKED_ANSWERS - 1)]
    rows = leaderboard(StatsSnapshot.from_samples(steady + losers + few), CONFIG.models)
    assert [(r.deployment, r.ranked, r.answered) for r in rows] == [
        ("slow", True, 100), ("fast", False, 0), ("idle", False, MIN_RANKED_ANSWERS - 1),
    ]  # fmt: skip
    slow, fast, idle = rows
    assert slow.tokens_per_s_vs_fastest == 0.0 and idle.tokens_per_s_vs_fastest is None
    assert fast.tokens_per_s_p50 is not None and fast.tokens_per_s_vs_fastest is None
    assert (fast.success_rate, fast.e2e_p50_s) == (None, None)  # censored: no say in success or end-to-end
    for text in (render_compact(rows), render_table(rows)):
        lines = text.splitlines()
        assert "fastest" in next(line for line in lines if line.lstrip().startswith(("slow", "m ")) and "slow" in line)
        assert any("thin (0)" in line and "fast" in line for line in lines)
        assert any(f"thin ({MIN_RANKED_ANSWERS - 1})" in line and "idle" in line for line in lines)
        assert lines[-1] == THIN_NOTE
    # The JSON keeps them, and a client reading it back (``gateway stats --url``) ranks the same.
    parsed = [LeaderboardRow.from_json(asdict(row)) for row in rows]
    assert parsed == rows
    assert render_compact(parsed) == render_compact(rows)
    # One more complete answer and the row is ranked: compared, sorted by its speed.
    rows = leaderboard(StatsSnapshot.from_samples(steady + few + few[:1]), CONFIG.models)
    assert [(r.deployment, r.ranked) for r in rows][:2] == [("idle", True), ("slow", True)]
    assert rows[1].tokens_per_s_vs_fastest == pytest.approx(50.0 / 400.0 - 1, rel=0.05)


def test_rows_of_a_gateway_before_ranking_rank_as_it_did() -> None:
    old = {"model": "m", "deployment": "a", "samples": 9, "tokens_per_s_p50": 10.0, "tokens_per_s_vs_fastest": 0.0}
    assert LeaderboardRow.from_json(old).ranked
    assert not LeaderboardRow.from_json(old | {"tokens_per_s_vs_fastest": None}).ranked


def test_table_columns_and_cells() -> None:
    text = render_table(leaderboard(snapshot(), CONFIG.models))
    lines = text.splitlines()
    header = lines[0]
    positions = [header.index(name) for name in TABLE_HEADER]
    assert positions == sorted(positions)  # the leaderboard's column order
    assert header.index("Tokens/s p50") < header.index("Δ vs fastest p50") < header.index("Tokens/s p95 floor")
    assert header.index("Tokens/s p99 floor") < header.index("TTFT p95") < header.index("End-to-end p99")
    assert header.index("End-to-end p99") < header.index("Success")
    fast, slow, idle = lines[2], lines[3], lines[4]
    assert "fastest" in fast and "100.0%" in fast
    assert "80.0%" in slow and "%" in slow.split()[3]
    assert idle.split()[2:5] == ["-", "-", "-"]


def test_the_default_table_fits_a_100_column_terminal_and_wide_has_every_column() -> None:
    long_names = parse_config(
        {
            "providers": [{"name": n, "base_url": f"http://127.0.0.1:1/{n}"} for n in ("fast", "slow", "idle")],
            "models": [
                {
                    "name": "meta-llama-3.3-70b-instruct-turbo",
                    "deployments": [
                        {"provider": p, "model": "u", "name": f"{p}-us-east-1-dedicated", "price_in": 0.5}
                        for p in ("fast", "slow", "idle")
                    ],
                }
            ],
        },
        source="test.toml",
    )
    samples = [
        make_sample(model="meta-llama-3.3-70b-instruct-turbo", deployment=f"{p}-us-east-1-dedicated", tokens_per_s=s)
        for p, s in (("fast", 12345.6), ("slow", 55.5))
        for _ in range(20000)
    ]
    rows = leaderboard(StatsSnapshot.from_samples(samples), long_names.models, in_flight=lambda m, d: 100)
    compact = render_compact(rows)
    assert max(len(line) for line in compact.splitlines()) <= 100, compact
    lines = compact.splitlines()
    assert lines[0] == "meta-llama-3.3-70b-instruct-turbo"
    assert [lines[1].index(name) for name in COMPACT_HEADER] == sorted(lines[1].index(n) for n in COMPACT_HEADER)
    name, speed = lines[3].split()[:2]
    assert name == "fast-us-east-1-dedicated" and speed.startswith("12,") and "20000" in lines[3]
    wide = render_table(rows)
    assert max(len(line) for line in wide.splitlines()) > 100
    assert all(name in wide.splitlines()[0] for name in TABLE_HEADER)


def test_csv_holds_raw_values() -> None:
    rows = leaderboard(snapshot(), CONFIG.models)
    parsed = list(csv.DictReader(io.StringIO(render_csv(rows))))
    assert [r["deployment"] for r in parsed] == ["fast", "slow", "idle", "x"]
    assert float(parsed[1]["success_rate"]) == 0.8
    assert parsed[2]["tokens_per_s_p50"] == "" and parsed[2]["samples"] == "0"
    assert LeaderboardRow.from_json({**parsed[0], "samples": 100}).deployment == "fast"
