"""What the dashboard shows, as plain data: the leaderboard's rows grouped per model, with what
the page adds to them (traffic share, the Pareto frontier, the routing choice, a colour).

Pure functions of the rows and the config, so the page's numbers are tested without HTML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.config import ModelConfig
from gateway.dashboard.spark import rank_changes
from gateway.dashboard.why import WhyView
from gateway.leaderboard import LeaderboardRow
from gateway.stats import StoreHealth
from gateway.stats.history import BUCKET_S, History, HistoryPoint

PALETTE = ("#2563eb", "#ea580c", "#059669", "#9333ea", "#db2777", "#0891b2", "#ca8a04", "#4b5563")
"""One colour per deployment name, by its first place in the config, so that it keeps its colour
when rows re-sort by speed and is the same in every model's card (past eight names, colours
repeat). Chosen to stay apart for the common colour-vision deficiencies."""


@dataclass(frozen=True, slots=True)
class RoutingChoice:
    """The deployment a model's next request goes to first, and on what basis.

    ``basis`` is shown as is, so it must say honestly how the choice was made: "config order"
    when the router only follows the config, "best score" once it ranks by measurements.
    """

    deployment: str
    basis: str
    detail: str = ""
    """A sentence on how the choice is made, shown as the basis' tooltip."""


@dataclass(frozen=True, slots=True)
class BoardRow:
    """One leaderboard row as the page draws it."""

    row: LeaderboardRow
    color: str
    share: float | None
    """This deployment's share of the model's samples in the window; None when the model has none."""
    on_frontier: bool
    """Plotted and ranked (``LeaderboardRow.ranked``), and no other ranked deployment of the model both starts sooner
    and streams faster."""
    chosen: bool
    cheapest: bool = False
    """The router predicts the lowest cost for a typical request here (see ``WhyView``)."""
    history: tuple[HistoryPoint, ...] = ()
    """Its last half hour, one point a minute (from the stats store, every replica's samples)."""

    @property
    def plotted(self) -> bool:
        return self.row.ttft_p50_s is not None and self.row.tokens_per_s_p50 is not None


@dataclass(frozen=True, slots=True)
class ModelBoard:
    """One model's card: its deployments fastest first, as the leaderboard orders them."""

    model: str
    deployments: tuple[BoardRow, ...]
    samples: int
    choice: RoutingChoice | None
    why: WhyView | None = None
    """The router's ranking for a typical request: why ``choice`` leads."""
    history_until: int = 0
    """The start of the newest minute of the history (the sparklines' right edge)."""
    rank_changes: tuple[int, ...] = ()
    """Minutes at which the model's fastest deployment changed, in the last half hour."""

    @property
    def next_is_dominated(self) -> bool:
        """The next deployment is plotted but beaten on both medians (the chart alone would say it should not be)."""
        return any(d.chosen and d.plotted and not d.on_frontier for d in self.deployments)

    @property
    def colors(self) -> dict[str, str]:
        return {d.row.deployment: d.color for d in self.deployments}


@dataclass(frozen=True, slots=True)
class DashboardView:
    """Everything one rendering of the page needs."""

    boards: tuple[ModelBoard, ...]
    window_s: int
    taken_at: float
    backend: str
    health: StoreHealth
    base_url: str
    """Where clients reach this gateway (for the empty state's example request)."""
    keys_required: bool
    """Whether a client key must be sent (shown in the example request)."""

    @property
    def samples(self) -> int:
        return sum(board.samples for board in self.boards)


def pareto_frontier(points: Mapping[str, tuple[float, float]]) -> frozenset[str]:
    """The names of points (TTFT, tokens/s) that no other point beats on both axes at once.

    A deployment is off the frontier only when another one both starts sooner (strictly lower
    TTFT) and streams faster (strictly more tokens/s); every other trade-off is a fair choice.
    """
    return frozenset(
        name
        for name, (ttft, speed) in points.items()
        if not any(other_ttft < ttft and other_speed > speed for other_ttft, other_speed in points.values())
    )


def config_order_choices(models: Sequence[ModelConfig]) -> dict[str, RoutingChoice]:
    """What ``OrderedRouter`` does: each model's first deployment in the config is tried first."""
    detail = "The router tries this model's deployments in the order of the config, whatever their figures."
    return {
        model.name: RoutingChoice(model.deployments[0].name, "config order", detail)
        for model in models
        if model.deployments
    }


def _colors(rows: Sequence[LeaderboardRow], models: Sequence[ModelConfig]) -> dict[str, str]:
    """A colour per deployment name, the same in every model's card: config order first, then the rest by name."""
    order = list(dict.fromkeys(d.name for m in models for d in m.deployments))
    order += sorted({r.deployment for r in rows} - set(order))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(order)}


def _board(
    model: str,
    rows: Sequence[LeaderboardRow],
    colors: Mapping[str, str],
    choice: RoutingChoice | None,
    why: WhyView | None,
    history: History,
    until: int,
) -> ModelBoard:
    total = sum(row.samples for row in rows)
    points = {
        r.deployment: (r.ttft_p50_s, r.tokens_per_s_p50)
        for r in rows
        if r.ttft_p50_s is not None and r.tokens_per_s_p50 is not None and r.ranked  # thin speeds are not compared
    }
    frontier = pareto_frontier(points)
    views = tuple(
        BoardRow(
            row=row,
            color=colors[row.deployment],
            share=row.samples / total if total else None,
            on_frontier=row.deployment in frontier,
            chosen=choice is not None and choice.deployment == row.deployment,
            cheapest=why is not None and why.cheapest == row.deployment,
            history=history.get((model, row.deployment), ()),
        )
        for row in rows
    )
    changes = rank_changes({d.row.deployment: d.history for d in views})
    return ModelBoard(
        model=model,
        deployments=views,
        samples=total,
        choice=choice,
        why=why,
        history_until=until,
        rank_changes=changes,
    )


def model_boards(
    rows: Sequence[LeaderboardRow],
    models: Sequence[ModelConfig],
    choices: Mapping[str, RoutingChoice],
    why: Mapping[str, WhyView] | None = None,
    history: History | None = None,
    now: float = 0.0,
) -> tuple[ModelBoard, ...]:
    """The leaderboard's rows (grouped per model, fastest first) as one board per model, in their order;
    ``history`` (``StatsStore.history``) up to ``now`` gives each deployment its sparkline."""
    why = why or {}
    history = history or {}
    until = int(now // BUCKET_S) * BUCKET_S
    grouped: dict[str, list[LeaderboardRow]] = {}
    for row in rows:
        grouped.setdefault(row.model, []).append(row)
    colors = _colors(rows, models)
    return tuple(
        _board(model, group, colors, choices.get(model), why.get(model), history, until)
        for model, group in grouped.items()
    )
