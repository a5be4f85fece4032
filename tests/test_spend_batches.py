"""Settlements written in batches (``gateway.admission.spending.redis_settle``) leave Redis as writing each
alone did: the same keys, fields, counts and expiries, for settlements with and without holds, of several
spenders, over a day's end; and many settlements at once take a few round trips, not one each."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.admission.access import AccessState
from gateway.admission.ratelimit import InMemoryRateLimiter
from gateway.admission.spending import Budget, Spender, SpendLedger
from gateway.admission.spending.ledger import bookings_of
from gateway.admission.spending.redis_settle import (
    BREAKDOWN_RETENTION_S,
    COUNTER_GRACE_S,
    SETTLE,
    SettleCall,
    Settlement,
)
from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.admission.spending.store import Booking, HeldScope, Hold, breakdown_periods
from gateway.admission.spending.windows import period_of, to_nanos
from gateway.config import StatsConfig
from gateway.redis_client import RedisConnections
from gateway.samples import Sample
from tests.redis_server import RedisServer


def _day_end() -> float:
    """A second before today's end (UTC): settlements around it fall in two days, and their counters' TTLs (which
    count from the real time) are those of current periods."""
    return (time.time() // 86_400 + 1) * 86_400 - 1.0


def _sample(cost: float, deployment: str = "a", model: str = "m") -> Sample:
    return Sample(
        model=model, deployment=deployment, provider=deployment, endpoint="chat", stream=True, outcome="ok",
        started_at=0.0, cost_usd=cost,
    )  # fmt: skip


def _old_write(client: redis.Redis, prefix: str, settlement: Settlement, now: float) -> None:
    """The store's write before batches, copied: one ``_SETTLE`` per settlement, its rows summed alone."""
    hold, tag, at, bookings = settlement
    keys: list[str] = []
    scope_ttls: list[int] = []
    for held in hold.scopes if hold is not None else ():
        scope = held.scope
        base = f"{prefix}:budget:{{{scope.tag}}}:{scope.kind}:{scope.ident}:{held.period.id}"
        keys.extend([base, base + ":holds"])
        scope_ttls.append(max(1, int(held.period.resets_at - now) + COUNTER_GRACE_S))
    periods = breakdown_periods(at)
    keys.extend(f"{prefix}:spend:{{{tag}}}:{period.window}:{period.id}" for period in periods)
    rows: dict[str, list[int]] = {}
    for booking in bookings:
        row = rows.setdefault(json.dumps(booking.row, separators=(",", ":")), [0, 0])
        row[0] += booking.cost
        row[1] += 1
    args: list[Any] = [
        f"{hold.id}:{hold.amount}" if hold is not None else "",
        hold.amount if hold is not None else 0,
        sum(b.cost for b in bookings),
        len(scope_ttls),
        *scope_ttls,
        *(max(1, int(p.resets_at - now) + BREAKDOWN_RETENTION_S[p.window]) for p in periods),
        len(rows),
    ]
    for field, (cost, attempts) in rows.items():
        args.extend([field, cost, attempts])
    client.eval(SETTLE, len(keys), *keys, *args)


def _contents(client: redis.Redis, prefix: str) -> tuple[dict[str, tuple[str, Any]], dict[str, int]]:
    """Every key under ``prefix`` (named without it): its type and value; and its TTL."""
    found: dict[str, tuple[str, Any]] = {}
    ttls: dict[str, int] = {}
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        kind = client.type(key)
        value: Any = client.hgetall(key) if kind == "hash" else client.zrange(key, 0, -1, withscores=True)
        name = str(key).removeprefix(prefix)  # decoded: the client answers str
        found[name] = (str(kind), value)
        ttls[name] = int(client.ttl(key))
    return found, ttls


def _settlements() -> tuple[list[Settlement], list[Hold], list[Spender]]:
    """Unbudgeted requests of three spenders (two of one team), repeated rows, nothing spent, and two days;
    budgeted requests with holds (a key's and its team's), one settled with no bookings."""
    plain = [
        Spender.of("k1", "ann", None, None, None),
        Spender.of("k2", "ben", "blue", None, None),
        Spender.of("k3", "cat", "blue", None, None),
    ]
    budgeted = Spender.of("k4", "dan", "blue", Budget(1.0, "day"), Budget(5.0, "month"))
    settlements: list[Settlement] = []
    holds: list[Hold] = []
    day_end = _day_end()
    for index in range(40):
        at = day_end + index * 0.05  # the first 20 today, the rest tomorrow
        spender = plain[index % 3]
        samples = [_sample(0.00001 * (index % 4), deployment="ab"[index % 2], model="mn"[index % 5 == 0])]
        if index % 7 == 0:
            samples.append(_sample(0.0, deployment="c"))  # a fallback that cost nothing
        settlements.append((None, spender.tag, at, tuple(bookings_of(spender, samples))))
        if index % 8 == 0:
            scopes = tuple(HeldScope(scope, period_of(scope.budget.window, at)) for scope in budgeted.scopes)
            hold = Hold(f"h{index}", to_nanos(0.001), scopes, budgeted.tag, at + 60)
            holds.append(hold)
            bookings: Sequence[Booking] = bookings_of(budgeted, [_sample(0.0002)]) if index % 16 == 0 else ()
            settlements.append((hold, budgeted.tag, at, tuple(bookings)))
    return settlements, holds, plain + [budgeted]


@pytest.fixture
def server(tmp_path: Path) -> Any:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


async def _queued(store: RedisSpendStore, settlements: list[Settlement]) -> None:
    """``settlements`` handed over as requests do (``queue``: no task, no wait), a Redis round trip after every
    tenth (the writer takes a batch meanwhile, still on its way when ``flushed`` is called), then waited for."""
    for index, settlement in enumerate(settlements):
        store.queue(*settlement)
        if index % 10 == 9:
            await store.client.ping()
    await store.flushed()


@pytest.mark.parametrize("entry", ["settle", "queue"])
def test_batched_settlements_leave_redis_as_one_by_one(server: RedisServer, entry: str) -> None:
    settlements, holds, _ = _settlements()
    client = server.client()

    async def batched() -> None:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix=f"new{entry}")
        store = RedisSpendStore(RedisConnections(config, {}).requests(), f"new{entry}", owns_client=True)
        reference_config = StatsConfig(backend="redis", redis_url=server.url, key_prefix=f"old{entry}")
        reference = RedisSpendStore(RedisConnections(reference_config, {}).requests(), f"old{entry}", owns_client=True)
        try:
            for hold in holds:
                for one in (store, reference):
                    assert await one.reserve(hold, hold.expires_at - 60) is None
            if entry == "settle":
                await asyncio.gather(*(store.settle(*settlement) for settlement in settlements))
            else:
                await _queued(store, settlements)
            assert not store._pending  # all written before ``aclose``
        finally:
            await store.aclose()
            await reference.aclose()

    asyncio.run(batched())
    now = time.time()
    for settlement in settlements:
        _old_write(client, f"old{entry}", settlement, now)
    (old, old_ttls), (new, new_ttls) = _contents(client, f"old{entry}"), _contents(client, f"new{entry}")
    client.close()
    assert sum(":spend:" in key for key in new) >= 2 * 4, sorted(new)  # two tags, two days, a week, a month
    assert sum(":budget:" in key for key in new) >= 3, sorted(new)  # the key's two days, the team's month
    assert new == old
    assert new_ttls.keys() == old_ttls.keys()
    assert all(abs(new_ttls[key] - old_ttls[key]) <= 2 for key in new_ttls), (new_ttls, old_ttls)


def test_many_settlements_share_round_trips(server: RedisServer) -> None:
    spender = Spender.of("k1", "ann", None, None, None)

    async def settle_all() -> None:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix="trips")
        ledger = SpendLedger(RedisSpendStore(RedisConnections(config, {}).requests(), "trips", owns_client=True))
        try:
            await asyncio.gather(*(ledger.settle(spender, None, [_sample(0.00001)]) for _ in range(300)))
            _, rows = await ledger.rows("day", [spender.tag])
            assert [(row.cost, row.attempts) for row in rows] == [(300 * to_nanos(0.00001), 300)]
        finally:
            await ledger.store.aclose()

    before = server.command_calls()
    asyncio.run(settle_all())
    after = server.command_calls()
    scripts = after.get("evalsha", 0) - before.get("evalsha", 0)
    assert 1 <= scripts <= 3, f"{scripts} script calls for 300 settlements"


def test_a_flushed_script_cache_is_loaded_again(server: RedisServer) -> None:
    spender = Spender.of("k1", "ann", None, None, None)

    async def settle_twice() -> None:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix="flushed")
        ledger = SpendLedger(RedisSpendStore(RedisConnections(config, {}).requests(), "flushed", owns_client=True))
        try:
            await ledger.settle(spender, None, [_sample(0.00001)])
            with server.client() as client:
                client.script_flush()  # a restarted or failed-over Redis knows no scripts
            await ledger.settle(spender, None, [_sample(0.00001)])
            _, rows = await ledger.rows("day", [spender.tag])
            assert [(row.cost, row.attempts) for row in rows] == [(2 * to_nanos(0.00001), 2)]
            assert ledger.store.degraded_reason() is None
        finally:
            await ledger.store.aclose()

    asyncio.run(settle_twice())


def test_a_settlement_written_after_an_outage_ends_it(server: RedisServer) -> None:
    """With no budget in use nothing but settlements reaches Redis: their writer must see it back."""
    spender = Spender.of("k1", "ann", None, None, None)

    async def outage() -> None:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix="outage")
        store = RedisSpendStore(RedisConnections(config, {}).requests(), "outage", owns_client=True)
        store.retry_s = 0.0  # try Redis again on every settlement
        ledger = SpendLedger(store)
        try:
            server.stop()
            await ledger.settle(spender, None, [_sample(0.00001)])  # kept
            assert store.degraded_reason() is not None
            server.start()
            await ledger.settle(spender, None, [_sample(0.00001)])  # written, with the one kept
            assert store.degraded_reason() is None
            _, rows = await ledger.rows("day", [spender.tag])
            assert [(row.cost, row.attempts) for row in rows] == [(2 * to_nanos(0.00001), 2)]
        finally:
            await store.aclose()

    asyncio.run(outage())


def test_an_address_where_something_else_answers_is_an_outage() -> None:
    """Redis gone and its port taken by another server (here an HTTP one): no Redis answers, so settlements are
    kept and the store says it is degraded, as when the connection is refused."""
    spender = Spender.of("k1", "ann", None, None, None)

    async def not_redis() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            await writer.drain()
            writer.close()

        http = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = http.sockets[0].getsockname()[1]
        config = StatsConfig(backend="redis", redis_url=f"redis://127.0.0.1:{port}/0", key_prefix="other")
        store = RedisSpendStore(RedisConnections(config, {}).requests(), "other", owns_client=True)
        ledger = SpendLedger(store)
        try:
            await ledger.settle(spender, None, [_sample(0.00001)])
            assert store.degraded_reason() is not None
            assert len(store._pending) == 1  # kept, to be written once Redis answers
        finally:
            await store.aclose()
            http.close()
            await http.wait_closed()

    asyncio.run(not_redis())


def test_a_reservation_waits_as_long_as_the_request_path_allows() -> None:
    """``redis_request_timeout_s`` bounds the wait for a connection and for the call: the reservation, both."""
    config = StatsConfig(backend="redis", redis_request_timeout_s=3.0)
    store = RedisSpendStore.from_config(config, RedisConnections(config, {}))
    assert store.timeout_s == 6.0


class _GatedStore(RedisSpendStore):
    """A store whose writer stops before each round trip until ``gate`` is set (``sending`` tells it got there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sending = asyncio.Event()
        self.gate = asyncio.Event()

    async def _send(self, calls: list[SettleCall]) -> list[Any]:
        self.sending.set()
        await self.gate.wait()
        return await super()._send(calls)


def test_flushed_waits_for_the_batch_on_its_way(server: RedisServer) -> None:
    """Nothing left in the queue, one batch being written: ``flushed`` returns once it is."""
    spender = Spender.of("k1", "ann", None, None, None)

    async def in_flight() -> None:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix="flight")
        store = _GatedStore(RedisConnections(config, {}).requests(), "flight", owns_client=True)
        ledger = SpendLedger(store)
        try:
            for _ in range(5):
                ledger.settle_now(spender, None, [_sample(0.00001)])
            await store.sending.wait()  # the writer took all five
            waiting = asyncio.ensure_future(store.flushed())
            for _ in range(20):
                await asyncio.sleep(0)
            assert not waiting.done()
            store.gate.set()
            await waiting
            with server.client() as client:  # read apart from the store: written before ``flushed`` returned
                written = client.hgetall(f"flight:spend:{{{spender.tag}}}:day:{breakdown_periods(time.time())[0].id}")
            assert sorted(written.values()) == ["5", str(5 * to_nanos(0.00001))]
        finally:
            store.gate.set()
            await store.aclose()

    asyncio.run(in_flight())


def test_a_request_settlement_makes_no_task_and_settled_waits_for_the_writer(server: RedisServer) -> None:
    """``AccessState.settle`` (every request) queues: one writer task for 300 settlements, and ``settled`` returns
    once Redis holds all of them, as when each settlement waited in a task of its own."""
    spender = Spender.of("k1", "ann", None, None, None)

    async def requests() -> None:
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix="access")
        store = RedisSpendStore(RedisConnections(config, {}).requests(), "access", owns_client=True)
        state = AccessState(InMemoryRateLimiter(), SpendLedger(store))
        try:
            before = len(asyncio.all_tasks())
            for _ in range(300):
                state.settle(spender, None, [_sample(0.00001)])
            assert len(asyncio.all_tasks()) - before == 1  # the writer
            await state.settled()
            with server.client() as client:
                written = client.hgetall(f"access:spend:{{{spender.tag}}}:day:{breakdown_periods(time.time())[0].id}")
            assert sorted(written.values()) == ["300", str(300 * to_nanos(0.00001))]
        finally:
            await state.aclose()

    asyncio.run(requests())
