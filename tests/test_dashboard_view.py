"""The dashboard's numbers before any HTML: Pareto frontier, traffic share, colours, routing choice."""

from __future__ import annotations

import math
import random

from gateway.config import GatewayConfig, parse_config
from gateway.dashboard.chart import CHAR_W, log_ticks, nice_ticks, place_labels, render_scatter, speed_ticks
from gateway.dashboard.view import PALETTE, config_order_choices, model_boards, pareto_frontier
from gateway.leaderboard import leaderboard
from gateway.samples import Sample
from gateway.stats import StatsSnapshot


def config(*models: tuple[str, list[str]]) -> GatewayConfig:
    providers = sorted({p for _, deployments in models for p in deployments})
    return parse_config(
        {
            "providers": [{"name": p, "base_url": f"http://127.0.0.1:9/{p}/v1"} for p in providers],
            "models": [
                {"name": name, "deployments": [{"provider": p, "model": p, "price_in": 1.0} for p in deployments]}
                for name, deployments in models
            ],
        },
        source="test.toml",
    )


def sample(deployment: str, ttft: float | None, speed: float | None, *, model: str = "m", ok: bool = True) -> Sample:
    return Sample(
        model=model,
        deployment=deployment,
        provider=deployment,
        endpoint="chat",
        stream=True,
        outcome="ok" if ok else "timeout",
        started_at=0.0,
        ttft_s=ttft,
        tokens_per_s=speed,
        e2e_s=1.0 if ok else None,
    )


def test_frontier_keeps_every_point_that_nothing_beats_on_both_axes() -> None:
    points = {
        "early": (0.1, 100.0),  # starts first
        "stream": (0.5, 400.0),  # streams fastest
        "middle": (0.3, 200.0),  # a fair trade-off between the two
        "beaten": (0.4, 150.0),  # "middle" starts sooner and streams faster
        "slowest": (0.6, 50.0),  # beaten by all of the above
    }
    assert pareto_frontier(points) == {"early", "stream", "middle"}


def test_frontier_needs_strictly_better_on_both_axes_to_drop_a_point() -> None:
    # Same TTFT, different speed: neither starts *sooner*, so neither is beaten on both.
    assert pareto_frontier({"a": (0.2, 100.0), "b": (0.2, 300.0)}) == {"a", "b"}
    assert pareto_frontier({"a": (0.2, 100.0), "b": (0.2, 100.0)}) == {"a", "b"}
    assert pareto_frontier({"only": (1.0, 1.0)}) == {"only"}
    assert pareto_frontier({}) == frozenset()


def test_boards_group_rows_per_model_with_shares_frontier_and_choice() -> None:
    cfg = config(("m", ["first", "fast", "slow", "idle"]), ("other", ["fast"]))
    samples = (
        [sample("first", 0.1, 100.0)] * 6
        + [sample("first", None, None, ok=False)] * 1
        + [sample("fast", 0.3, 500.0)] * 3
        + [sample("slow", 0.4, 80.0)] * 1
    )
    rows = leaderboard(StatsSnapshot.from_samples(samples), cfg.models)
    boards = model_boards(rows, cfg.models, config_order_choices(cfg.models))

    assert [b.model for b in boards] == ["m", "other"]
    board = boards[0]
    assert board.samples == 11 and board.choice is not None
    assert (board.choice.deployment, board.choice.basis) == ("first", "config order")
    by_name = {d.row.deployment: d for d in board.deployments}
    # "first" rests on 5 complete answers at least (its timeout may have given a cut-off speed: it is taken to have);
    # "fast" on 3 and "slow" on 1 are thin: shown
    # after the ranked rows (fastest first among them) and left off the frontier, however fast they look.
    assert [d.row.deployment for d in board.deployments] == ["first", "fast", "slow", "idle"]
    assert [d.row.ranked for d in board.deployments] == [True, False, False, False]
    assert {name: d.share for name, d in by_name.items()} == {
        "fast": 3 / 11,
        "first": 7 / 11,
        "slow": 1 / 11,
        "idle": 0.0,
    }
    assert {name for name, d in by_name.items() if d.on_frontier} == {"first"}
    assert [by_name[n].row.answered for n in ("first", "fast", "slow")] == [5, 3, 1]
    assert [name for name, d in by_name.items() if d.chosen] == ["first"]
    assert not by_name["idle"].plotted and not by_name["idle"].on_frontier
    # Colours follow the config's order, not the speed ranking, so they survive a re-sort.
    assert [by_name[n].color for n in ("first", "fast", "slow", "idle")] == list(PALETTE[:4])

    unmeasured = boards[1]
    assert unmeasured.samples == 0 and [d.share for d in unmeasured.deployments] == [None]
    assert unmeasured.deployments[0].color == by_name["fast"].color  # one colour per name on the page


def test_a_deployment_only_the_snapshot_knows_gets_a_colour_after_the_configured_ones() -> None:
    cfg = config(("m", ["a"]))
    rows = leaderboard(StatsSnapshot.from_samples([sample("a", 0.1, 10.0), sample("zz", 0.2, 20.0)]), cfg.models)
    board = model_boards(rows, cfg.models, {})[0]
    assert {d.row.deployment: d.color for d in board.deployments} == {"a": PALETTE[0], "zz": PALETTE[1]}
    assert board.choice is None and not any(d.chosen for d in board.deployments)


def test_axis_ticks_are_round_and_cover_the_values() -> None:
    assert nice_ticks(0.0, 0.83) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(0.0, 443.0) == [0.0, 200.0, 400.0, 600.0]
    assert nice_ticks(0.0, 1200.0) == [0.0, 500.0, 1000.0, 1500.0]
    for values in ([0.013], [0.2, 0.4], [1.0, 7.0], [50.0, 99.0], [10.0, 3_333.0], [0.0]):
        ticks = speed_ticks(values)
        assert ticks[0] == 0.0 and ticks[-1] >= max(values) and 3 <= len(ticks) <= 7
    for values in ([0.013], [0.2, 0.4], [1.0, 7.0], [0.05, 9.0], [0.3, 0.31]):
        ticks = log_ticks(values)
        assert ticks[0] <= min(values) and ticks[-1] >= max(values) and 2 <= len(ticks) <= 7
        for tick in ticks:  # every tick is 1, 2 or 5 times a power of ten
            mantissa = tick / 10 ** math.floor(math.log10(tick) + 1e-9)
            assert any(math.isclose(mantissa, m) for m in (1.0, 2.0, 5.0)), ticks


def test_speed_starts_at_zero_and_time_is_logarithmic_so_small_gaps_stay_small() -> None:
    # 72 against 94.6 tokens/s: a 30% gap, drawn as one (a zoomed axis would make it look tenfold).
    clustered = speed_ticks([72.0, 79.0, 94.6])
    assert clustered[0] == 0.0 and clustered[-1] == 200.0
    # 0.3 s against 3 s is a tenfold gap; 1 s against 1.3 s is not: equal ratios, equal distances.
    assert log_ticks([0.3, 3.0]) == [0.2, 0.5, 1.0, 2.0, 5.0]


def test_axes_stay_put_while_the_medians_wander_between_refreshes() -> None:
    rng = random.Random(3)
    base = {"a": (0.42, 240.0), "b": (1.9, 270.0), "c": (0.36, 61.0)}
    seen_x, seen_y = set(), set()
    for _ in range(50):  # fifty refreshes, each median moving by up to ±8%
        ttfts = [t * rng.uniform(0.92, 1.08) for t, _ in base.values()]
        speeds = [v * rng.uniform(0.92, 1.08) for _, v in base.values()]
        seen_x.add(tuple(log_ticks(ttfts)))
        seen_y.add(tuple(speed_ticks(speeds)))
    assert len(seen_x) == 1 and len(seen_y) == 1, (seen_x, seen_y)


def test_labels_avoid_each_other_and_keep_the_chosen_and_frontier_first() -> None:
    cfg = config(("m", ["chosen", "near1", "near2", "near3", "far"]))
    samples = [sample("chosen", 0.40, 95.0), sample("near1", 0.40, 79.0), sample("near2", 0.47, 76.0)]
    samples += [sample("near3", 0.36, 74.0), sample("far", 0.9, 40.0)]
    rows = leaderboard(StatsSnapshot.from_samples(samples), cfg.models)
    board = model_boards(rows, cfg.models, config_order_choices(cfg.models))[0]
    # Points as close as the chart would draw them: a few pixels apart.
    at = {"chosen": (200.0, 60.0), "near1": (200.0, 72.0), "near2": (204.0, 74.0), "near3": (196.0, 76.0)}
    at["far"] = (330.0, 190.0)
    placed = place_labels(board.deployments, at)
    assert "chosen" in placed and "far" in placed
    boxes = []
    for name, (lx, ly, anchor) in placed.items():
        w = CHAR_W * len(name)
        left = lx if anchor == "start" else lx - w if anchor == "end" else lx - w / 2
        boxes.append((left, ly - 10, left + w, ly + 1))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)


def test_every_point_keeps_its_label_even_in_a_crowd() -> None:
    names = [f"provider-{i}" for i in range(9)]
    cfg = config(("m", names))
    samples = [sample(name, 0.40 + i * 0.001, 95.0 - i * 0.1) for i, name in enumerate(names)]
    rows = leaderboard(StatsSnapshot.from_samples(samples), cfg.models)
    board = model_boards(rows, cfg.models, config_order_choices(cfg.models))[0]
    at = {name: (200.0 + i, 60.0 + i) for i, name in enumerate(names)}  # nine points on top of each other
    placed = place_labels(board.deployments, at)
    assert set(placed) == set(names)
    svg = render_scatter(board)
    assert all(f">{name}</text>" in svg for name in names)
