"""Budget windows: UTC calendar days, ISO weeks and months, and the money unit budgets count in.

A window is a calendar period in UTC, never a sliding one: a "day" budget resets at 00:00 UTC,
a "week" budget on Monday at 00:00 UTC, a "month" budget on the 1st at 00:00 UTC. Each period
has an id (``2026-12-01``, ``2026-W49``, ``2026-12``) that names its counters, so a new period
starts from zero without anything being reset, and its reset time is the next period's start.

Money is counted in whole nano-dollars (1e-9 USD): integers add up exactly in Python and in a
Redis script alike (a Lua number holds integers exactly up to 2^53, i.e. nine million dollars),
where floats summed in two orders would disagree by a hair at the very limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

BudgetWindow = Literal["day", "week", "month"]
BUDGET_WINDOWS: tuple[BudgetWindow, ...] = ("day", "week", "month")
NANOS_PER_USD = 1_000_000_000


def to_nanos(usd: float, *, round_up: bool = False) -> int:
    """USD as whole nano-dollars; ``round_up`` for reservations, so a hold never falls short by rounding."""
    scaled = usd * NANOS_PER_USD
    return math.ceil(scaled - 1e-6) if round_up else round(scaled)


def to_usd(nanos: int) -> float:
    return nanos / NANOS_PER_USD


@dataclass(frozen=True, slots=True)
class Budget:
    """A spending cap: ``limit_usd`` per calendar ``window`` (UTC)."""

    limit_usd: float
    window: BudgetWindow = "month"

    @property
    def limit_nanos(self) -> int:
        return to_nanos(self.limit_usd)


@dataclass(frozen=True, slots=True)
class Period:
    """One calendar period of a window: its id, and when it started and ends (unix seconds, UTC)."""

    window: BudgetWindow
    id: str
    starts_at: float
    resets_at: float

    @property
    def starts_iso(self) -> str:
        return iso_time(self.starts_at)

    @property
    def resets_iso(self) -> str:
        return iso_time(self.resets_at)


_LAST: dict[BudgetWindow, Period] = {}


def period_of(window: BudgetWindow, now: float) -> Period:
    """The period of ``window`` that holds the instant ``now`` (unix seconds).

    The last one found per window is reused while ``now`` falls in it: every request asks, and the
    calendar arithmetic costs more than the rest of a settlement."""
    last = _LAST.get(window)
    if last is not None and last.starts_at <= now < last.resets_at:
        return last
    period = _period_of(window, now)
    _LAST[window] = period
    return period


def _period_of(window: BudgetWindow, now: float) -> Period:
    moment = datetime.fromtimestamp(now, UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "day":
        start, end = day, day + timedelta(days=1)
        ident = start.strftime("%Y-%m-%d")
    elif window == "week":
        start = day - timedelta(days=day.weekday())  # Monday, as ISO 8601 weeks start
        end = start + timedelta(days=7)
        year, week, _ = start.isocalendar()
        ident = f"{year}-W{week:02d}"
    else:
        start = day.replace(day=1)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        ident = start.strftime("%Y-%m")
    return Period(window, ident, start.timestamp(), end.timestamp())


def iso_time(timestamp: float) -> str:
    """``2026-12-02T00:00:00Z``: how reset times are shown in errors, the API and the CLI."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
