"""Budgets at the store and ledger level: calendar windows, exact reservations, holds that expire,
both backends with one test body, 64 reservations racing on one Redis from two replicas, and
Redis killed (budgets fail closed; settlements are kept and written when it returns)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.admission.spending import Budget, InMemorySpendStore, Spender, SpendLedger, SpendStore
from gateway.admission.spending.redis_settle import budget_keys
from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.admission.spending.store import HeldScope
from gateway.admission.spending.windows import iso_time, period_of, to_nanos
from gateway.config import StatsConfig
from gateway.errors import BudgetExceeded, BudgetUnavailable
from gateway.redis_client import RedisConnections
from gateway.samples import Sample
from tests.redis_server import RedisServer
from tests.redis_topologies import LoopbackCluster
from tests.support.clock import FakeClock


def _at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_calendar_windows_in_utc() -> None:
    day = period_of("day", _at("2026-12-31T23:59:59"))
    assert (day.id, day.starts_iso, day.resets_iso) == ("2026-12-31", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z")
    week = period_of("week", _at("2027-01-01T12:00:00"))  # a Friday: its ISO week began on Monday, Dec 28
    assert (week.id, week.starts_iso, week.resets_iso) == ("2026-W53", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z")
    month = period_of("month", _at("2026-12-15T08:00:00"))
    assert (month.id, month.resets_iso) == ("2026-12", "2027-01-01T00:00:00Z")
    assert period_of("month", _at("2027-02-28T23:00:00")).resets_iso == "2027-03-01T00:00:00Z"
    assert period_of("day", day.resets_at).id == "2027-01-01", "the reset instant belongs to the next period"
    assert iso_time(day.resets_at) == day.resets_iso


def _own_store(config: StatsConfig) -> RedisSpendStore:
    """A store on a client of its own (closed with the store), as each replica has one."""
    return RedisSpendStore(RedisConnections(config, {}).requests(), config.key_prefix, owns_client=True)


@pytest.fixture(params=["memory", "redis"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SpendStore]]:
    """The same test body runs on both backends."""
    if request.param == "memory":
        yield InMemorySpendStore
        return
    server = RedisServer(tmp_path).start()
    yield lambda: _own_store(StatsConfig(backend="redis", redis_url=server.url, key_prefix="t"))
    server.stop()


def _sample(cost: float, deployment: str = "a") -> Sample:
    return Sample(
        model="m", deployment=deployment, provider=deployment, endpoint="chat", stream=False, outcome="ok",
        started_at=0.0, cost_usd=cost,
    )  # fmt: skip


KEY = Spender.of("k1", "alice", "search", Budget(0.00001, "day"), Budget(0.000015, "month"))
"""Key budget: 10,000 nano-dollars a day; its team's: 15,000 a month."""
TEAMMATE = Spender.of("k9", "gina", "search", None, Budget(0.000015, "month"))


def test_reserve_and_settle_on_both_backends(store_factory: Callable[[], SpendStore]) -> None:
    async def scenario() -> None:
        clock = FakeClock(_at("2026-12-01T10:00:00"))
        ledger = SpendLedger(store_factory(), clock)
        try:
            first = await ledger.reserve(KEY, 0.000004, 60)
            second = await ledger.reserve(KEY, 0.000004, 60)
            assert first is not None and second is not None
            with pytest.raises(BudgetExceeded) as refused:
                await ledger.reserve(KEY, 0.000004, 60)  # 8,000 held + 4,000 > 10,000
            details = refused.value.details
            assert details["scope"] == "key" and details["name"] == "alice" and details["window"] == "day"
            assert details["spent_usd"] == 0 and details["reserved_usd"] == pytest.approx(0.000008)
            assert details["resets_at"] == "2026-12-02T00:00:00Z" and refused.value.status_code == 402
            # The first answer cost 1,000 on one deployment and 500 on another (a fallback).
            await ledger.settle(KEY, first, [_sample(0.000001, "a"), _sample(0.0000005, "b")])
            exact = await ledger.reserve(KEY, 0.0000045, 60)  # 1,500 + 4,000 + 4,500 = 10,000: fits exactly
            assert exact is not None
            with pytest.raises(BudgetExceeded):
                await ledger.reserve(KEY, 0.000000001, 60)
            await ledger.settle(KEY, second, [])  # a request that cost nothing gives its hold back
            await ledger.settle(KEY, exact, [_sample(0.000002)])
            balances = {b.held.scope.kind: b for b in await ledger.balances([KEY])}
            assert (balances["key"].spent, balances["key"].reserved) == (3_500, 0)
            assert (balances["team"].spent, balances["team"].reserved) == (3_500, 0)
            # Another key of the team, with no budget of its own, shares the team's monthly 15,000.
            clock.now = _at("2026-12-02T00:00:00")
            with pytest.raises(BudgetExceeded) as by_team:
                await ledger.reserve(TEAMMATE, 0.000012, 60)  # 3,500 + 12,000 > 15,000
            assert by_team.value.details["scope"] == "team" and by_team.value.details["name"] == "search"
            assert by_team.value.details["resets_at"] == "2027-01-01T00:00:00Z"
            assert await ledger.reserve(TEAMMATE, 0.0000115, 60) is not None
            with pytest.raises(BudgetExceeded) as key_too:
                await ledger.reserve(KEY, 0.000000001, 60)  # a new day for alice, but the team is full
            assert key_too.value.details["scope"] == "team"
            period, rows = await ledger.rows("month", [KEY.tag])
            assert period.id == "2026-12"
            assert sorted((r.deployment, r.cost, r.attempts) for r in rows) == [("a", 3_000, 2), ("b", 500, 1)]
        finally:
            await ledger.store.aclose()

    asyncio.run(scenario())


def test_window_resets_at_the_stated_time(store_factory: Callable[[], SpendStore]) -> None:
    async def scenario() -> None:
        clock = FakeClock(_at("2026-12-01T23:59:58"))
        spender = Spender.of("k2", "bob", None, Budget(0.00001, "day"), None)
        ledger = SpendLedger(store_factory(), clock)
        try:
            hold = await ledger.reserve(spender, 0.00001, 60)
            await ledger.settle(spender, hold, [_sample(0.00001)])
            with pytest.raises(BudgetExceeded) as refused:
                await ledger.reserve(spender, 0.000001, 60)
            resets_at = refused.value.details["resets_at"]
            clock.now = _at(resets_at.rstrip("Z")) - 0.001
            with pytest.raises(BudgetExceeded):
                await ledger.reserve(spender, 0.000001, 60)
            clock.now = _at(resets_at.rstrip("Z"))
            assert await ledger.reserve(spender, 0.00001, 60) is not None, "a full budget again at the reset"
        finally:
            await ledger.store.aclose()

    asyncio.run(scenario())


def test_holds_of_a_lost_replica_expire(store_factory: Callable[[], SpendStore]) -> None:
    async def scenario() -> None:
        clock = FakeClock(_at("2026-12-01T10:00:00"))
        spender = Spender.of("k3", "carol", None, Budget(0.00001, "day"), None)
        ledger = SpendLedger(store_factory(), clock)
        try:
            assert await ledger.reserve(spender, 0.00001, 30) is not None  # never settled: its replica died
            with pytest.raises(BudgetExceeded):
                await ledger.reserve(spender, 0.000001, 30)
            clock.advance(30)
            assert await ledger.reserve(spender, 0.00001, 30) is not None, "the lost hold expired"
        finally:
            await ledger.store.aclose()

    asyncio.run(scenario())


def test_a_free_deployments_zero_hold_is_settled_and_expires(store_factory: Callable[[], SpendStore]) -> None:
    """A hold of 0 (a deployment priced 0, e.g. self-hosted) is settled, booked and expired like any other: in Redis
    its release was ``HINCRBY reserved -0``, which Redis refuses, so its settlement was retried for ever and never
    booked, and a reservation that met an expired one was refused."""

    async def scenario() -> None:
        clock = FakeClock(_at("2026-12-01T10:00:00"))
        spender = Spender.of("k4", "dave", None, Budget(0.00001, "day"), None)
        ledger = SpendLedger(store_factory(), clock)
        try:
            hold = await ledger.reserve(spender, 0.0, 30)
            assert hold is not None
            await ledger.settle(spender, hold, [_sample(0.0)])
            lost = await ledger.reserve(spender, 0.0, 30)  # never settled: its replica died
            assert lost is not None
            clock.advance(30)
            assert await ledger.reserve(spender, 0.000001, 30) is not None, "the expired hold of 0 is let go"
            _, rows = await ledger.rows("day", [spender.tag])
            assert [(r.deployment, r.cost, r.attempts) for r in rows] == [("a", 0, 1)]
            if isinstance(ledger.store, RedisSpendStore):
                assert ledger.store.degraded_reason() is None and not ledger.store._pending
        finally:
            await ledger.store.aclose()

    asyncio.run(scenario())


def test_a_slot_met_mid_migration_refuses_that_reservation_only(redis_cluster: LoopbackCluster) -> None:
    """A key's counters split between two masters mid-migration cannot be checked (``TRYAGAIN`` until redis-py's
    redirections run out): that reservation is refused, but it is no outage, so the next one, once the slot has
    moved, is not refused for ``retry_s`` too."""
    spender = Spender.of("k7", "mia", None, Budget(1.0, "day"), None)
    clock = FakeClock(_at("2026-12-01T10:00:00"))

    async def reserve(ledger: SpendLedger) -> object:
        try:
            return await ledger.reserve(spender, 0.01, 60)
        except BudgetUnavailable as exc:
            return exc

    async def scenario() -> None:
        config = StatsConfig(backend="redis", redis_mode="cluster", redis_url=redis_cluster.url, key_prefix="mig")
        store = _own_store(config)
        store.retry_s = 600.0  # an outage would refuse for the rest of the test
        ledger = SpendLedger(store, clock)
        try:
            assert not isinstance(await reserve(ledger), BudgetUnavailable)
            counters, holds = budget_keys("mig", HeldScope(spender.scopes[0], period_of("day", clock())))
            slot = redis_cluster.keyslot(counters)
            source = redis_cluster.master_of_slot(slot)
            target = next(n for n in redis_cluster.live() if n.role() == "master" and n is not source)
            target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id())
            source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id())
            source.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", holds)  # the counters stay
            assert isinstance(await reserve(ledger), BudgetUnavailable)  # split: cannot be checked now
            redis_cluster.migrate_slot(slot, target)  # the rest, and the slot's new owner told to all
            assert not isinstance(await reserve(ledger), BudgetUnavailable)
            assert store.degraded_reason() is None
            redis_cluster.migrate_slot(slot, source)  # the session's cluster as it was
        finally:
            await store.aclose()

    asyncio.run(scenario())


def test_64_reservations_race_from_two_replicas(tmp_path: Path) -> None:
    """One Redis, two stores (two replicas), 64 reservations at once: exactly as many fit as the budget holds."""
    server = RedisServer(tmp_path).start()

    async def scenario() -> list[bool]:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix="race")
        ledgers = [SpendLedger(_own_store(config)) for _ in range(2)]
        spender = Spender.of("k4", "dave", "t", Budget(0.01, "day"), Budget(1.0, "day"))

        async def one(index: int) -> bool:
            try:
                await ledgers[index % 2].reserve(spender, 0.0007, 60)
            except BudgetExceeded:
                return False
            return True

        try:
            return await asyncio.gather(*(one(i) for i in range(64)))
        finally:
            for ledger in ledgers:
                await ledger.store.aclose()

    try:
        admitted = asyncio.run(scenario())
    finally:
        server.stop()
    assert sum(admitted) == to_nanos(0.01) // to_nanos(0.0007) == 14


def test_redis_down_fails_closed_and_keeps_settlements(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()

    async def scenario() -> None:
        store = _own_store(StatsConfig(backend="redis", redis_url=server.url, key_prefix="down"))
        store.retry_s = 0.0  # try Redis again on every call, so its return is seen at once
        ledger = SpendLedger(store)
        spender = Spender.of("k5", "erin", None, Budget(1.0, "day"), None)
        unbudgeted = Spender.of("k6", "frank", None, None, None)
        try:
            hold = await ledger.reserve(spender, 0.01, 60)
            server.stop()
            with pytest.raises(BudgetUnavailable) as refused:
                await ledger.reserve(spender, 0.01, 60)
            assert refused.value.status_code == 503 and refused.value.code == "budget_unavailable"
            assert await ledger.reserve(unbudgeted, 0.01, 60) is None, "a key without a budget needs no store"
            await ledger.settle(spender, hold, [_sample(0.25)])  # kept, not lost
            assert store.degraded_reason() is not None
            server.start()
            # The next call that reaches Redis writes the kept settlement (in the background).
            assert await ledger.reserve(spender, 0.01, 60) is not None
            while store._drain_task is not None:
                await store._drain_task
            (balance,) = await ledger.balances([spender])
            assert balance.spent == to_nanos(0.25) and balance.reserved == to_nanos(0.01)
            assert store.degraded_reason() is None
        finally:
            await store.aclose()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_settle_books_the_rows_settling_one_by_one_books() -> None:
    """The in-memory store keeps the day's, week's and month's rows it last booked into: across period ends, and a
    clock that goes back, its counters and rows are those of finding each period per settlement, as it did."""
    import random

    from gateway.admission.spending.store import PERIODS_KEPT, Booking, HeldScope, Hold, breakdown_periods

    def settle_by_periods(store: InMemorySpendStore, hold: Hold | None, at: float, bookings: list[Booking]) -> None:
        total = sum(b.cost for b in bookings)
        if hold is not None:
            for held in hold.scopes:
                key = store._key(held)
                counters = store._counters.setdefault(key, [0, 0])
                if store._holds.get(key, {}).pop(hold.id, None) is not None:
                    counters[1] -= hold.amount
                counters[0] += total
        for period in breakdown_periods(at):
            rows = store._rows.get((period.window, period.id))
            if rows is None:
                rows = store._rows[(period.window, period.id)] = {}
                store._prune(period.window)
            for booking in bookings:
                row = rows.setdefault(booking.row, [0, 0])
                row[0] += booking.cost
                row[1] += 1

    rng = random.Random(5)
    kept, reference = InMemorySpendStore(), InMemorySpendStore()
    spender = Spender.of("k1", "alice", "t", Budget(10.0, "day"), Budget(50.0, "month"))
    at = _at("2026-12-30T22:00:00")
    for i in range(400):
        at += rng.choice([1.0, 600.0, 3600.0 * 7, -3600.0 * 30])
        held = tuple(HeldScope(scope, period_of(scope.budget.window, at)) for scope in spender.scopes)
        hold = rng.choice([None, Hold(f"h{i}", 1000, held, spender.tag, at + 60)])
        bookings = [
            Booking("k1", "t", "m", rng.choice("ab"), rng.choice(["a", "a2"]), rng.randint(0, 5000))
            for _ in range(rng.randint(0, 2))
        ]
        for store in (kept, reference):
            if hold is not None:
                asyncio.run(store.reserve(hold, at))
        kept.settle_now(hold, at, bookings)
        settle_by_periods(reference, hold, at, bookings)
        assert kept._counters == reference._counters and kept._holds == reference._holds
        assert list(kept._rows.items()) == list(reference._rows.items())
    assert len([w for w, _ in kept._rows if w == "day"]) == PERIODS_KEPT
