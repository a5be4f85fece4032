"""Where spend is counted: the store protocol, its values, and the in-memory backend.

Two kinds of counters, both per calendar period (``gateway.admission.spending.windows``):

- a budget's: ``spent`` and ``reserved`` of one key or one team, checked and raised together by
  ``reserve`` (refused when ``spent + reserved + amount > limit``), and settled by ``settle``
  (the hold's amount leaves ``reserved``, the real cost joins ``spent``);
- the breakdown: cost and attempts per (key, team, model, provider, deployment), booked by
  ``settle`` into the current day, week and month alike, read by ``GET /v1/gateway/spend``.

A hold also carries an expiry (the request's deadline and a margin): a replica that dies between
``reserve`` and ``settle`` cannot keep a budget's money reserved beyond it, since every
``reserve`` first drops the holds that expired. Amounts are whole nano-dollars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.admission.spending.windows import BUDGET_WINDOWS, Budget, BudgetWindow, Period, period_of
from gateway.frozen import positional_maker

ScopeKind = Literal["key", "team"]
PERIODS_KEPT = 3
"""The in-memory breakdown keeps this many periods of each window (the current one and those before)."""


class SpendStoreDown(Exception):
    """The shared store could not be reached: budgets cannot be checked."""


@dataclass(frozen=True, slots=True)
class BudgetScope:
    """What one budget caps: a key (``ident`` its key_id) or a team (``ident`` its name)."""

    kind: ScopeKind
    ident: str
    name: str
    """Shown in errors, the API and metrics: the key's name from the keys file, or the team's."""
    budget: Budget
    tag: str
    """The shard tag a key and its team share (``gateway.admission.spending.redis_store``)."""


@dataclass(frozen=True, slots=True)
class HeldScope:
    scope: BudgetScope
    period: Period


@dataclass(frozen=True, slots=True)
class Hold:
    """One request's reservation against every budget it falls under (its key's, its team's)."""

    id: str
    amount: int
    scopes: tuple[HeldScope, ...]
    tag: str
    """The shard tag a key and its team share (``gateway.admission.spending.redis_store``)."""
    expires_at: float


@dataclass(frozen=True, slots=True)
class Refusal:
    """The budget a reservation did not fit: what it had spent and reserved, and what was asked."""

    held: HeldScope
    spent: int
    reserved: int
    amount: int


@dataclass(frozen=True, slots=True)
class Booking:
    """One attempt's cost, to the deployment that produced it."""

    key_id: str
    team: str
    model: str
    provider: str
    deployment: str
    cost: int

    @property
    def row(self) -> tuple[str, str, str, str, str]:
        return (self.key_id, self.team, self.model, self.provider, self.deployment)


booking_from_fields = positional_maker(Booking)
"""``Booking(*values)`` (``gateway.frozen``): one per attempt settled, without the frozen ``__init__``'s cost."""


@dataclass(frozen=True, slots=True)
class SpendRow:
    """Cost and attempts of one (key, team, model, provider, deployment) over one period."""

    key_id: str
    team: str
    model: str
    provider: str
    deployment: str
    cost: int
    attempts: int


@dataclass(frozen=True, slots=True)
class Balance:
    held: HeldScope
    spent: int
    reserved: int

    @property
    def remaining(self) -> int:
        return max(0, self.held.scope.budget.limit_nanos - self.spent - self.reserved)


class SpendStore(Protocol):
    """Counts spend and holds budgets. In memory (one replica) or in Redis (every replica).

    ``reserve`` raises ``SpendStoreDown`` when it cannot check; ``settle`` never raises (a store
    that cannot book now keeps the booking and books it later); ``rows`` and ``balances`` raise
    ``SpendStoreDown``. ``queue`` is ``settle`` without waiting (every request's settlement: no coroutine,
    no task), and ``flushed`` waits until what was queued so far is written, or kept. ``budgeted``: whether a key of
    the serving config falls under a budget (its own or its team's; set by ``AccessControl``): without one, a store
    that cannot be reached refuses nothing and is no reason to call the gateway degraded.
    """

    budgeted: bool

    async def reserve(self, hold: Hold, now: float) -> Refusal | None: ...

    async def settle(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None: ...

    def queue(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None: ...

    async def flushed(self) -> None: ...

    async def balances(self, held: Sequence[HeldScope], now: float) -> list[Balance]: ...

    async def rows(self, period: Period, tags: Sequence[str]) -> list[SpendRow]: ...

    def degraded_reason(self) -> str | None: ...

    async def aclose(self) -> None: ...


def breakdown_periods(at: float) -> list[Period]:
    """The day, week and month an attempt's cost is booked into."""
    return [period_of(window, at) for window in BUDGET_WINDOWS]


_CounterKey = tuple[ScopeKind, str, str]


class InMemorySpendStore:
    """This process's own counters (``[stats] backend = "memory"``): exact, and for one replica only.

    Keys and teams come from the config, so the counters are bounded; the breakdown keeps the last
    ``PERIODS_KEPT`` periods of each window.
    """

    def __init__(self) -> None:
        self.budgeted = True
        self._counters: dict[_CounterKey, list[int]] = {}
        self._holds: dict[_CounterKey, dict[str, tuple[int, float]]] = {}
        self._rows: dict[tuple[BudgetWindow, str], dict[tuple[str, str, str, str, str], list[int]]] = {}
        self._current: tuple[float, float, list[dict[tuple[str, str, str, str, str], list[int]]]] | None = None
        """The rows of the day, week and month ``settle`` last booked into, and the span they all hold: every
        settlement books into the same three until one of them ends."""

    @staticmethod
    def _key(held: HeldScope) -> _CounterKey:
        return (held.scope.kind, held.scope.ident, held.period.id)

    def _expire(self, key: _CounterKey, now: float) -> list[int]:
        counters = self._counters.setdefault(key, [0, 0])
        holds = self._holds.get(key)
        if holds:
            for hold_id, (amount, expires_at) in list(holds.items()):
                if expires_at <= now:
                    del holds[hold_id]
                    counters[1] -= amount
        return counters

    async def reserve(self, hold: Hold, now: float) -> Refusal | None:
        for held in hold.scopes:
            spent, reserved = self._expire(self._key(held), now)
            if spent + reserved + hold.amount > held.scope.budget.limit_nanos:
                return Refusal(held, spent, reserved, hold.amount)
        for held in hold.scopes:
            key = self._key(held)
            self._counters[key][1] += hold.amount
            self._holds.setdefault(key, {})[hold.id] = (hold.amount, hold.expires_at)
        return None

    async def settle(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None:
        self.settle_now(hold, at, bookings)

    async def flushed(self) -> None:
        """Nothing to wait for (``queue`` books at once)."""

    def settle_now(self, hold: Hold | None, at: float, bookings: Sequence[Booking]) -> None:
        """``settle``, without a coroutine: it never waits (``queue``, whose tag the memory has no use for)."""
        self.queue(hold, "", at, bookings)

    def queue(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None:
        """Booked at once: nothing is ever left queued. The booking itself is here, not in ``settle_now``: every
        request's settlement comes through ``queue`` (``SpendLedger.settle_now``), one call rather than two."""
        if hold is not None:
            total = sum(b.cost for b in bookings)
            for held in hold.scopes:
                key = self._key(held)
                counters = self._counters.setdefault(key, [0, 0])
                if self._holds.get(key, {}).pop(hold.id, None) is not None:
                    counters[1] -= hold.amount
                counters[0] += total
        current = self._current
        if current is not None and current[0] <= at < current[1]:
            tables = current[2]
        else:
            tables = []
            starts, resets = [], []
            for period in breakdown_periods(at):
                rows = self._rows.get((period.window, period.id))
                if rows is None:
                    rows = self._rows[(period.window, period.id)] = {}
                    self._prune(period.window)
                tables.append(rows)
                starts.append(period.starts_at)
                resets.append(period.resets_at)
            self._current = (max(starts), min(resets), tables)
        for booking in bookings:
            # ``booking.row``, inline: a property call per booking
            ident = (booking.key_id, booking.team, booking.model, booking.provider, booking.deployment)
            cost = booking.cost
            for rows in tables:
                row = rows.get(ident)
                if row is None:
                    row = rows[ident] = [0, 0]
                row[0] += cost
                row[1] += 1

    def _prune(self, window: BudgetWindow) -> None:
        periods = sorted(p for w, p in self._rows if w == window)
        for old in periods[:-PERIODS_KEPT]:
            del self._rows[(window, old)]

    async def balances(self, held: Sequence[HeldScope], now: float) -> list[Balance]:
        result = []
        for one in held:
            spent, reserved = self._expire(self._key(one), now)
            result.append(Balance(one, spent, reserved))
        return result

    async def rows(self, period: Period, tags: Sequence[str]) -> list[SpendRow]:
        rows = self._rows.get((period.window, period.id), {})
        return [SpendRow(*row, cost, attempts) for row, (cost, attempts) in rows.items()]

    def degraded_reason(self) -> str | None:
        return None

    async def aclose(self) -> None:
        pass
