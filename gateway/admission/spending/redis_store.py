"""Budgets and spend shared by every replica through Redis (``[stats] backend = "redis"``).

Layout (``<p>`` is ``[stats] key_prefix``, ``<tag>`` ``t:<team>`` for a key in a team, else
``k:<key_id>``)::

    <p>:budget:{<tag>}:<kind>:<ident>:<period>         hash: spent, reserved (nano-dollars)
    <p>:budget:{<tag>}:<kind>:<ident>:<period>:holds   zset: "<hold id>:<amount>" scored by expiry
    <p>:spend:{<tag>}:<window>:<period>                hash: c|<row> cost, n|<row> attempts

Why the tag: a reservation must check and raise a key's budget and its team's budget in one
atomic step, and a Redis Cluster runs a multi-key script only when all its keys hash to one slot.
Tagging every key of a team (and of its keys) with the team keeps them in one slot, so one
script does it all: no window in which the key's hold is taken and the team's is not, and no
compensating release to get wrong. The cost is that one team's counters live on one shard,
which is a few small hashes.

If Redis cannot be reached, budgets fail closed: a request whose key or team has a budget is
refused with 503 ``budget_unavailable`` (a budget is a promise about money; an outage must not
turn it into unlimited spend on every replica at once), while keys without a budget are served
as usual (with no budget anywhere, ``budgeted`` False, nothing is refused: no warning, no ``/readyz`` reason).
Settlements that cannot be written are kept (up to ``PENDING_LIMIT``) and written, in order, once Redis answers
again; holds they would have released expire on their own.

Settlements are written by one background writer, never on a request's path: a request queues its
settlement (``queue``: no task, no wait; ``flushed`` waits for the writer), what is queued goes
in one pipeline per round trip, the settlements without a hold summed per spender
(``gateway.admission.spending.redis_settle``); a settlement waits up to ``BATCH_S`` for others to
share its round trip.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import MutableSequence, Sequence
from typing import Any

from redis.exceptions import ClusterError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.admission.spending.redis_reserve import RESERVE
from gateway.admission.spending.redis_settle import (
    COUNTER_GRACE_S,
    SettleCall,
    Settlement,
    breakdown_key,
    budget_keys,
    send_settlements,
    settle_calls,
)
from gateway.admission.spending.store import Balance, Booking, HeldScope, Hold, Refusal, SpendRow, SpendStoreDown
from gateway.admission.spending.windows import Period
from gateway.background import log_failure
from gateway.config import StatsConfig
from gateway.redis_client import RedisClient, RedisConnections
from gateway.redis_failures import describe_error, refuses_writes

logger = logging.getLogger("gateway.spending")

PENDING_LIMIT = 10_000
BATCH_S = 0.02
"""How long a settlement waits for others to share its round trip (its hold is released that much later)."""
BATCH_LIMIT = 512
"""Settlements written in one pipeline at most."""

_ERRORS = (RedisError, OSError, TimeoutError)


class RedisSpendStore:
    """Implements ``SpendStore`` on a ``redis.asyncio`` client it owns (closed by ``aclose``)."""

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        *,
        retry_s: float = 1.0,
        timeout_s: float = 1.0,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        """The longest a request waits on Redis for its reservation, a connection from the pool included."""
        self._owns_client = owns_client
        """Close ``client`` with the store (one made apart from a ``RedisConnections``, e.g. by a tool)."""
        self.prefix = prefix
        self.retry_s = retry_s
        self._reserve = client.register_script(RESERVE)
        self._pending: deque[tuple[Settlement, asyncio.Future[None] | None]] = deque()
        """Settlements not written yet, oldest first, each with the future its ``settle`` waits on (None: none)."""
        self._lost = 0
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._reason: str | None = None
        self._refusing = False
        """Down because Redis refused a command (OOM, READONLY…) rather than because it was gone."""
        self._drain_task: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None
        """Released once the batch being written is written, or kept."""
        self._recheck_task: asyncio.Task[None] | None = None
        """While down, asks again every ``retry_s``: an idle replica too sees Redis return, and writes what it kept."""
        self.budgeted = True  # ``SpendStore.budgeted``

    @classmethod
    def from_config(cls, stats: StatsConfig, redis: RedisConnections) -> RedisSpendStore:
        """On the request-path client of ``redis`` (``gateway.redis_client``), which it never closes. A reservation
        waits for a connection, then for the call, each bounded by ``redis_request_timeout_s``."""
        return cls(redis.requests(), stats.key_prefix, timeout_s=2 * stats.redis_request_timeout_s)

    # -- keys -----------------------------------------------------------------------------------

    def _budget_keys(self, held: HeldScope) -> tuple[str, str]:
        return budget_keys(self.prefix, held)

    def _breakdown_key(self, tag: str, period: Period) -> str:
        return breakdown_key(self.prefix, tag, period)

    # -- health ---------------------------------------------------------------------------------

    def _usable(self) -> bool:
        return self._down_since is None or time.monotonic() >= self._retry_at

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, RedisTimeoutError | ResponseError | ClusterError) and not refuses_writes(exc):
            # One call timed out in the client (its retry may still answer), failed on its own (a bad value),
            # or met a slot mid-migration (TRYAGAIN until the client's redirections run out): it refuses the
            # request that waited, but is no outage. Redis gone, refusing every write, or silent past this
            # store's own limit (``timeout_s``, the client's retry included: a hung Redis looks so, and every
            # request would wait it out) is one: refused at once for ``retry_s``.
            return
        if self._down_since is None:
            # A Redis that answers but refuses the budgets' commands (OOM under noeviction, READONLY after a
            # failover, MISCONF, NOPERM) refuses every budgeted request as surely as one that is gone: said
            # once, and on /readyz. Asked again at once, though: a refusal costs no wait, and after a failover
            # the client finds the new master at its next call.
            self._refusing = refuses_writes(exc)
            state = "refuses commands" if self._refusing else "unreachable"
            self._down_since = time.monotonic()
            said = f"budgets: Redis {state} ({describe_error(exc)})"
            self._reason = f"{said}; requests under a budget are refused"
            # With no budget anywhere nothing is refused: one info line, and spend records kept for later.
            warned = "requests of keys with a budget are refused until it returns"
            kept = "no key has a budget, so requests go on; spend records are kept and written when it returns"
            logger.log(
                logging.WARNING if self.budgeted else logging.INFO, "%s; %s", said, warned if self.budgeted else kept
            )
            if self._recheck_task is None:
                self._recheck_task = asyncio.ensure_future(self._recheck())
                self._recheck_task.add_done_callback(log_failure("budgets: asking redis again"))
        if not refuses_writes(exc):
            self._retry_at = time.monotonic() + self.retry_s

    async def _recheck(self) -> None:
        """Until Redis answers again, at each retry time: write what is kept (the writer's round trip says whether it
        is back), else ask it something that only reads."""
        try:
            while self._down_since is not None:
                wait = self._retry_at - time.monotonic() if not self._refusing else self.retry_s
                await asyncio.sleep(max(wait, 0.05))
                if self._drain_task is None and self._pending:
                    self._drain_task = self._start_drain()
                elif self._drain_task is None and self._usable():
                    try:
                        async with asyncio.timeout(self.timeout_s):
                            await self.client.ping()
                    except _ERRORS as exc:
                        self._failed(exc)
                    else:
                        await self._succeeded(wrote=False)
        finally:
            self._recheck_task = None

    def _reachable(self) -> None:
        if self._down_since is not None:
            logger.info("budgets: Redis reachable again")
            self._down_since = None
            self._reason = None
            self._refusing = False

    async def _succeeded(self, wrote: bool) -> None:
        """A call answered; one that only read (``wrote`` False) does not end a refusal of writes (OOM, READONLY)."""
        if wrote or not self._refusing:
            self._reachable()
        if self._pending and self._drain_task is None:
            # In the background: a reservation must not wait for an outage's backlog to be written.
            self._drain_task = self._start_drain()

    def degraded_reason(self) -> str | None:
        return self._reason if self.budgeted else None

    @property
    def kept(self) -> int:
        """Settlements not written yet (Redis away, or the writer's batch under way)."""
        return len(self._pending)

    # -- SpendStore -----------------------------------------------------------------------------

    async def _run_reserve(self, held: Sequence[HeldScope], now: float, args: list[Any], check: bool) -> list[int]:
        keys: list[str] = []
        for one in held:
            keys.extend(self._budget_keys(one))
            limit = one.scope.budget.limit_nanos if check else -1
            args.extend([limit, int(one.period.resets_at - now) + COUNTER_GRACE_S])
        if not self._usable():
            raise SpendStoreDown(self._reason or "Redis unreachable")
        try:
            async with asyncio.timeout(self.timeout_s):
                raw = await self._reserve(keys=keys, args=args)
        except _ERRORS as exc:
            self._failed(exc)
            raise SpendStoreDown(self._reason or "Redis unreachable") from exc
        await self._succeeded(wrote=check)  # a balance (check False) only reads
        return [int(value) for value in raw]

    async def reserve(self, hold: Hold, now: float) -> Refusal | None:
        member = f"{hold.id}:{hold.amount}"
        args = [repr(now), repr(hold.expires_at), member, hold.amount]
        try:
            raw = await self._run_reserve(hold.scopes, now, args, check=True)
        except (SpendStoreDown, asyncio.CancelledError) as exc:
            if not isinstance(exc, SpendStoreDown) or isinstance(exc.__cause__, TimeoutError | RedisTimeoutError):
                # Sent, its answer never read (the client hung up, or it came too late): Redis may have taken the
                # hold all the same, and nobody would release it before it expires (the request's whole deadline).
                # Released like a settlement with nothing booked: releasing a hold never taken changes nothing.
                self.queue(hold, hold.tag, now, ())
            raise
        ok, refused = raw[0], raw[1]
        if ok:
            return None
        index = refused - 1
        return Refusal(hold.scopes[index], raw[2 + 2 * index], raw[3 + 2 * index], hold.amount)

    async def balances(self, held: Sequence[HeldScope], now: float) -> list[Balance]:
        if not held:
            return []
        raw = await self._run_reserve(held, now, [repr(now), "0", "", 0], check=False)
        return [Balance(one, raw[2 + 2 * i], raw[3 + 2 * i]) for i, one in enumerate(held)]

    async def settle(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None:
        """Queue the settlement for the writer; return once it is written, or kept (Redis away: at once)."""
        self.queue(hold, tag, at, bookings)
        await self.flushed()

    def queue(self, hold: Hold | None, tag: str, at: float, bookings: Sequence[Booking]) -> None:
        """Queue the settlement for the writer, started if it is not running (Redis away: kept for later)."""
        self._keep((hold, tag, at, tuple(bookings)), None)
        if self._drain_task is None and self._usable():
            self._drain_task = self._start_drain()

    async def flushed(self) -> None:
        """Return once every settlement queued so far is written, or kept (Redis away: at once).

        Batches are taken from the front of the queue, one at a time, and a failed write releases every waiter
        (what it did not write is kept): the newest entry's future is done when all before it are too, the batch
        being written included (its newest entry's future, ``_writing``, when nothing is queued behind it). Only
        this and the writer make futures (the writer one per batch): ``queue`` makes none."""
        done = self._writing if self._writing is not None and not self._writing.done() else None
        if self._pending and self._usable():
            if self._drain_task is None:  # after an outage's retry time: nothing started the writer since
                self._drain_task = self._start_drain()
            done = self._future_of_newest(self._pending)
        if done is not None:
            await asyncio.shield(done)  # shared by every waiter: one cancelled leaves the others waiting

    @staticmethod
    def _future_of_newest(
        queued: MutableSequence[tuple[Settlement, asyncio.Future[None] | None]],
    ) -> asyncio.Future[None]:
        """The future the newest of ``queued`` is released by, made if it has none yet."""
        settlement, done = queued[-1]
        if done is None:
            done = asyncio.get_running_loop().create_future()
            queued[-1] = (settlement, done)
        return done

    def _keep(self, settlement: Settlement, done: asyncio.Future[None] | None) -> None:
        if len(self._pending) >= PENDING_LIMIT:
            self._lose_oldest()
        self._pending.append((settlement, done))

    def _lose_oldest(self) -> None:
        _, done = self._pending.popleft()
        if done is not None and not done.done():
            done.set_result(None)
        self._lost += 1
        logger.error("budgets: %d settlements could not be kept while Redis was down", self._lost)

    def _start_drain(self) -> asyncio.Task[None]:
        """The writer, in the background; a failure nobody awaits is said in the log (the queue keeps what it held)."""
        task = asyncio.ensure_future(self._drain())
        task.add_done_callback(log_failure("budgets: writing settlements to redis"))
        return task

    async def _drain(self) -> None:
        """Write what is queued, a batch per round trip, until nothing is left or a write fails."""
        try:
            while self._pending and self._usable():
                if len(self._pending) < BATCH_LIMIT:
                    await asyncio.sleep(BATCH_S)  # let the settlements of the next few requests join
                count = min(BATCH_LIMIT, len(self._pending))
                batch = [self._pending.popleft() for _ in range(count)]
                self._writing = self._future_of_newest(batch)  # for ``flushed``: the batch on its way
                if not await self._write_batch(batch):
                    return
        finally:
            self._drain_task = None

    async def _write_batch(self, batch: list[tuple[Settlement, asyncio.Future[None] | None]]) -> bool:
        """Send ``batch``; what did not go in is put back in front, in order. False if anything failed."""
        calls = settle_calls(self.prefix, [settlement for settlement, _ in batch], time.time())
        try:
            async with asyncio.timeout(self.timeout_s):
                results = await self._send(calls)
        except BaseException as exc:
            self._put_back(batch, set(range(len(batch))))  # cancelled too: nothing is known, all is kept
            if not isinstance(exc, _ERRORS):
                raise
            self._failed(exc)
            return False
        failed: set[int] = set()
        errors = []
        for call, result in zip(calls, results, strict=True):
            if isinstance(result, BaseException):
                failed.update(call.carries)
                errors.append(result)
        self._put_back(batch, failed)
        if errors:
            self._failed(errors[0])  # refused (OOM, READONLY…): as down, until a write goes through
        elif not self._refusing or any(not call.args[0] for call in calls):
            # Under OOM Redis still runs a settlement that releases a hold (its first write, ZREM, may free
            # memory), so only one without a hold (its first write a HINCRBY) shows that writes are taken again.
            self._reachable()
        return not errors

    def _put_back(self, batch: list[tuple[Settlement, asyncio.Future[None] | None]], failed: set[int]) -> None:
        """Put the ``failed`` of ``batch`` back in front of the queue, and let every ``settle`` that waits on
        the batch return; if anything failed, those that wait on settlements queued meanwhile return too
        (kept, as when Redis is away)."""
        kept = [(settlement, None) for index, (settlement, _) in enumerate(batch) if index in failed]
        self._pending.extendleft(reversed(kept))
        while len(self._pending) > PENDING_LIMIT:
            self._lose_oldest()
        waiting = [done for _, done in batch]
        if failed:
            waiting += [done for _, done in self._pending]
            self._pending = deque((settlement, None) for settlement, _ in self._pending)
        for done in waiting:
            if done is not None and not done.done():
                done.set_result(None)

    async def _send(self, calls: list[SettleCall]) -> list[Any]:
        return await send_settlements(self.client, calls)  # a method: a test's store delays it

    async def rows(self, period: Period, tags: Sequence[str]) -> list[SpendRow]:
        if not self._usable():
            raise SpendStoreDown(self._reason or "Redis unreachable")
        try:
            async with asyncio.timeout(self.timeout_s * 4):
                async with self.client.pipeline(transaction=False) as pipe:
                    for tag in tags:
                        pipe.hgetall(self._breakdown_key(tag, period))
                    tables = await pipe.execute()
        except _ERRORS as exc:
            self._failed(exc)
            raise SpendStoreDown(self._reason or "Redis unreachable") from exc
        await self._succeeded(wrote=False)
        found: list[SpendRow] = []
        for table in tables:
            costs: dict[str, int] = {}
            counts: dict[str, int] = {}
            for raw_field, raw_value in table.items():
                field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
                kind, _, row = field.partition("|")
                (costs if kind == "c" else counts)[row] = int(raw_value)
            for row, cost in costs.items():
                key_id, team, model, provider, deployment = json.loads(row)
                found.append(SpendRow(key_id, team, model, provider, deployment, cost, counts.get(row, 0)))
        return found

    async def aclose(self) -> None:
        if self._recheck_task is not None:
            self._recheck_task.cancel()
        if self._drain_task is not None:
            await self._drain_task
        if self._pending and self._usable():
            await self._drain()
        for _, done in self._pending:
            if done is not None and not done.done():
                done.set_result(None)  # left unwritten: their ``settle`` returns
        if self._owns_client:
            await self.client.aclose()
        # Otherwise the client is shared (``RedisConnections.requests``): its owner closes it.
