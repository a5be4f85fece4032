"""The ledger: reserve a request's worst case against its budgets, then settle it to the real cost.

Admission holds ``worst_case_usd`` (the estimated prompt at the input price plus the output
ceiling at the output price, at the dearest deployment the plan may reach) against the key's
budget and its team's, in one atomic step; a request that does not fit is refused (402
``budget_exceeded``) before any provider is called. When the answer ends, however it ends
(complete, broken, cancelled), the hold is released and the cost of every attempt it made is
booked: each attempt once, to the deployment that produced it (``Booking``), their sum to the
budgets. So the settled total of a budget never passes its limit while every request costs at
most what it reserved; a request that costs more (a provider that counts more prompt tokens
than the estimate, a hedge's second prompt, a continuation's prompt) overshoots by that excess only.

An agent asks for ``max_tokens: 32000`` on every call and is answered in a few hundred tokens: its
worst case can exceed a budget that its real answers fit many times over. When the worst case does
not fit, the request's *likely* cost is held instead: the same prompt, and as output the
``LIKELY_QUANTILE`` of the lengths this key's (else this model's) answers to requests of this shape
actually had (``likely_output_tokens``), once ``LIKELY_ANSWERS`` of them were heard. The rule's error
bound: the settled total passes the limit by at most the excesses of the requests in flight when the
last one was admitted, and one request held at its likely cost exceeds it by at most
``(max_tokens - likely tokens) x price_out``, which about one answer in a hundred does.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.admission.spending.store import (
    Balance,
    Booking,
    BudgetScope,
    HeldScope,
    Hold,
    Refusal,
    SpendRow,
    SpendStore,
    SpendStoreDown,
    booking_from_fields,
)
from gateway.admission.spending.windows import (
    NANOS_PER_USD,
    Budget,
    BudgetWindow,
    Period,
    period_of,
    to_nanos,
    to_usd,
)
from gateway.config import DeploymentConfig
from gateway.errors import BudgetExceeded, BudgetUnavailable
from gateway.routing.lengths import Forecast
from gateway.samples import Sample
from gateway.types import Clock

logger = logging.getLogger("gateway.spending")

HOLD_MARGIN_S = 60.0
"""A hold outlives the request's deadline by this much before it expires on its own."""
LIKELY_QUANTILE = 0.99
"""A request whose worst case does not fit holds the length that 99% of its kind of answers stay within."""
LIKELY_ANSWERS = 8
"""... once this many answers of its shape were heard (fewer say too little of the tail)."""


@dataclass(frozen=True, slots=True)
class Spender:
    """Who pays for a request: a key, its team ("" for none), and the budgets over them."""

    key_id: str
    key_name: str
    team: str
    scopes: tuple[BudgetScope, ...]
    tag: str = field(init=False, repr=False, compare=False)
    """``shard_tag(key_id, team)``: made once with the spender (every settlement reads it), not per read."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tag", shard_tag(self.key_id, self.team))

    @classmethod
    def of(
        cls, key_id: str, key_name: str, team: str | None, key_budget: Budget | None, team_budget: Budget | None
    ) -> Spender:
        tag = shard_tag(key_id, team or "")
        scopes = []
        if key_budget is not None:
            scopes.append(BudgetScope("key", key_id, key_name, key_budget, tag))
        if team and team_budget is not None:
            scopes.append(BudgetScope("team", team, team, team_budget, tag))
        return cls(key_id, key_name, team or "", tuple(scopes))


def shard_tag(key_id: str, team: str) -> str:
    """The hash tag of a key's counters: its team's, so that the key and the team share a Redis slot."""
    return f"t:{team}" if team else f"k:{key_id}"


def worst_case_usd(deployments: Iterable[DeploymentConfig], prompt_tokens: int, output_tokens: int) -> float:
    """What the request could cost at most on any of ``deployments`` (the dearest of them)."""
    return max((d.cost_usd(prompt_tokens, output_tokens) for d in deployments), default=0.0)


def likely_output_tokens(length: Forecast | None, ceiling: int, choices: int = 1) -> int | None:
    """The output a request likely costs at most: ``LIKELY_QUANTILE`` of the predicted lengths, within ``ceiling``,
    for each of its ``choices`` (None: the router predicted none, or on fewer than ``LIKELY_ANSWERS`` answers).

    One rule for both of a key's holds: its dollar budget (``SpendLedger.reserve``'s ``likely_usd``) and its
    tokens per minute (``RateLimiter.acquire``'s ``likely_tokens``)."""
    if length is None or length.answers < LIKELY_ANSWERS:
        return None
    return min(ceiling, math.ceil(length.at(LIKELY_QUANTILE))) * choices


def bookings_of(spender: Spender, samples: Iterable[Sample]) -> list[Booking]:
    """One booking per attempt, to the deployment that produced it (a failure that cost nothing books 0)."""
    key_id, team = spender.key_id, spender.team
    return [
        booking_from_fields(key_id, team, s.model, s.provider, s.deployment, to_nanos(s.cost_usd or 0.0))
        for s in samples
    ]


class SpendListener(Protocol):
    """Hears each settlement's bookings and each refusal (``gateway.admission.spending.metrics.SpendMetrics``)."""

    def booked(self, key: str, team: str, bookings: Sequence[Booking]) -> None: ...

    def refused(self, scope: str, name: str) -> None: ...


class SpendLedger:
    """Budgets and spend over a ``SpendStore``; lives as long as the process (a reload keeps it)."""

    def __init__(self, store: SpendStore, wall_clock: Clock = time.time) -> None:
        self.store = store
        self.wall_clock = wall_clock
        self.listeners: list[SpendListener] = []

    def held(self, spender: Spender, now: float | None = None) -> tuple[HeldScope, ...]:
        at = self.wall_clock() if now is None else now
        return tuple(HeldScope(scope, period_of(scope.budget.window, at)) for scope in spender.scopes)

    async def reserve(
        self, spender: Spender, amount_usd: float, ttl_s: float, likely_usd: float | None = None
    ) -> Hold | None:
        """Hold ``amount_usd`` against every budget of ``spender``, or ``likely_usd`` when that does not fit (a
        second round trip, on that path only); None when no budget applies.

        Raises ``BudgetExceeded`` (402) when neither fits, ``BudgetUnavailable`` (503) when the store cannot be
        reached.
        """
        if not spender.scopes:
            return None
        now = self.wall_clock()
        held = self.held(spender, now)
        amounts = [amount_usd] if likely_usd is None or likely_usd >= amount_usd else [amount_usd, likely_usd]
        for amount in amounts:
            hold = Hold(uuid.uuid4().hex, to_nanos(amount, round_up=True), held, spender.tag, now + ttl_s)
            try:
                refusal = await self.store.reserve(hold, now)
            except SpendStoreDown as exc:
                raise BudgetUnavailable(
                    f"the budget of key '{spender.key_name}' cannot be checked right now ({exc}); retry shortly",
                    headers={"retry-after": "1"},
                ) from exc
            if refusal is None:
                return hold
        assert refusal is not None
        for listener in self.listeners:
            listener.refused(refusal.held.scope.kind, refusal.held.scope.name)
        raise refused(refusal)

    async def settle(self, spender: Spender, hold: Hold | None, samples: Sequence[Sample]) -> None:
        """Release ``hold`` and book every attempt's cost. Never raises (the store keeps what it cannot write)."""
        bookings = bookings_of(spender, samples)
        if hold is None and not bookings:
            return
        at = self.wall_clock()
        await self.store.settle(hold, spender.tag, at, bookings)
        for listener in self.listeners:
            listener.booked(spender.key_name, spender.team, bookings)

    def settle_now(self, spender: Spender, hold: Hold | None, samples: Sequence[Sample]) -> None:
        """``settle`` without waiting (``SpendStore.queue``: booked at once in memory, queued for the writer in
        Redis; ``SpendStore.flushed`` waits for it): the same bookings, the same listeners told, at once rather
        than once written. Every request's settlement (``AccessState.settle``): no coroutine, no task; the bookings
        made as ``bookings_of`` makes them, in a loop here (no call, no comprehension's frame)."""
        key_id, team = spender.key_id, spender.team
        bookings = []
        for s in samples:
            # ``to_nanos(s.cost_usd or 0.0)``, inline (a frame per booking)
            cost = round((s.cost_usd or 0.0) * NANOS_PER_USD)
            bookings.append(booking_from_fields(key_id, team, s.model, s.provider, s.deployment, cost))
        if hold is None and not bookings:
            return
        self.store.queue(hold, spender.tag, self.wall_clock(), bookings)
        for listener in self.listeners:
            listener.booked(spender.key_name, spender.team, bookings)

    async def balances(self, spenders: Iterable[Spender]) -> list[Balance]:
        """Each distinct budget over ``spenders``, in its current period. Raises ``SpendStoreDown``."""
        now = self.wall_clock()
        seen: dict[tuple[str, str], HeldScope] = {}
        for spender in spenders:
            for held in self.held(spender, now):
                seen.setdefault((held.scope.kind, held.scope.ident), held)
        return await self.store.balances(list(seen.values()), now)

    async def rows(self, window: BudgetWindow, tags: Sequence[str]) -> tuple[Period, list[SpendRow]]:
        period = period_of(window, self.wall_clock())
        return period, await self.store.rows(period, sorted(set(tags)))


def refused(refusal: Refusal) -> BudgetExceeded:
    """The client's 402: which budget, what it holds, what the request needed, when it resets."""
    scope, period = refusal.held.scope, refusal.held.period
    budget = scope.budget
    who = f"key '{scope.name}'" if scope.kind == "key" else f"team '{scope.name}'"
    limit = budget.limit_nanos
    if refusal.amount > limit:
        why = (
            f"this request may cost up to ${to_usd(refusal.amount):.6f}, more than the whole budget; "
            "send a smaller prompt or max_tokens"
        )
    else:
        why = (
            f"${to_usd(refusal.spent):.6f} spent and ${to_usd(refusal.reserved):.6f} held by requests in flight "
            f"leave ${to_usd(max(0, limit - refusal.spent - refusal.reserved)):.6f}, and this request may cost up to "
            f"${to_usd(refusal.amount):.6f}"
        )
    message = f"budget of ${budget.limit_usd:g} per {budget.window} for {who} reached: {why}"
    message += f"; it resets at {period.resets_iso}"
    details = {
        "scope": scope.kind,
        "name": scope.name,
        "window": budget.window,
        "limit_usd": budget.limit_usd,
        "spent_usd": to_usd(refusal.spent),
        "reserved_usd": to_usd(refusal.reserved),
        "requested_usd": to_usd(refusal.amount),
        "resets_at": period.resets_iso,
    }
    return BudgetExceeded(message, details, headers={"x-gateway-budget-resets-at": period.resets_iso})
