"""Two choices of the Redis backend's request path, A/B in one process: hiredis against redis-py's Python parser,
and the spend settlement queued (``SpendStore.queue``) against a task per settlement (the former
``AccessState.settle``, copied here).

Whole streamed requests through the app (``benchmarks.hotpath_memory``: the provider answers from memory), stats
and spend in a ``redis-server`` of its own, µs of process CPU each (background work included). The variants run
in turn, ``--rounds`` times: on a shared machine the load moves between minutes, and a variant's median over
interleaved rounds is steadier than separate runs' best (``benchmarks.redis_record_cost --only whole`` moves by
±30 µs between runs). Every app is started afresh, so each variant's connections are made with its parser.

    python -m benchmarks.redis_ab                  # 4 rounds of 2,000 requests per variant
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis.asyncio.connection as redis_connection
import uvloop
from redis._parsers import _AsyncRESP3Parser
from redis.utils import HIREDIS_AVAILABLE

from benchmarks.hotpath_memory import driven_us, running_app
from gateway.accesslog import configure_access_log
from gateway.admission.access import AccessState
from gateway.admission.spending.ledger import Spender, SpendLedger, bookings_of
from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.admission.spending.store import Booking, Hold
from gateway.samples import Sample
from tests.redis_server import RedisServer


@contextlib.contextmanager
def python_parser() -> Iterator[None]:
    """redis-py as without hiredis meanwhile: its Python parser for new connections, its Python command packer."""
    connection = redis_connection.AbstractConnection
    original_init = connection.__init__
    names = vars(redis_connection)  # HIREDIS_AVAILABLE, read per connection: the command packer
    available = names["HIREDIS_AVAILABLE"]

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", _AsyncRESP3Parser)
        original_init(self, *args, **kwargs)

    connection.__init__ = init  # type: ignore[method-assign]
    names["HIREDIS_AVAILABLE"] = False
    try:
        yield
    finally:
        connection.__init__ = original_init  # type: ignore[method-assign]
        names["HIREDIS_AVAILABLE"] = available


async def _former_store_settle(
    store: RedisSpendStore, hold: Hold | None, tag: str, at: float, b: Sequence[Booking]
) -> None:
    """``RedisSpendStore.settle`` before ``queue``: a future per settlement, awaited until its batch is written."""
    settlement = (hold, tag, at, tuple(b))
    if not store._usable():
        store._keep(settlement, None)
        return
    done = asyncio.get_running_loop().create_future()
    store._keep(settlement, done)
    if store._drain_task is None:
        store._drain_task = asyncio.ensure_future(store._drain())
    await done


async def _former_ledger_settle(
    ledger: SpendLedger, spender: Spender, hold: Hold | None, samples: list[Sample]
) -> None:
    bookings = bookings_of(spender, samples)
    if hold is None and not bookings:
        return
    store = ledger.store
    assert isinstance(store, RedisSpendStore)
    await _former_store_settle(store, hold, spender.tag, ledger.wall_clock(), bookings)
    for listener in ledger.listeners:
        listener.booked(spender.key_name, spender.team, bookings)


def _settle_in_a_task(self: AccessState, spender: Spender, hold: Hold | None, samples: list[Sample]) -> None:
    """The former ``AccessState.settle`` with a Redis store: a task per request's settlement."""
    self.spawn(_former_ledger_settle(self.spend, spender, hold, samples))


@contextlib.contextmanager
def task_per_settlement() -> Iterator[None]:
    original = AccessState.__dict__["settle"]
    AccessState.settle = _settle_in_a_task  # type: ignore[method-assign]
    try:
        yield
    finally:
        AccessState.settle = original  # type: ignore[method-assign]


VARIANTS: list[tuple[str, bool, Callable[[], contextlib.AbstractContextManager[None]]]] = [
    ("memory", False, contextlib.nullcontext),
    ("redis (hiredis where installed, settlement queued)", True, contextlib.nullcontext),
    ("redis, Python parser", True, python_parser),
    ("redis, a task per settlement", True, task_per_settlement),
]


async def table(server: RedisServer, requests: int, repeats: int, rounds: int) -> str:
    found: dict[str, list[float]] = {label: [] for label, *_ in VARIANTS}
    for _ in range(rounds):
        for label, on_redis, context in VARIANTS:
            with context():
                async with running_app(1, server.url if on_redis else None) as app:
                    found[label].append(await driven_us(app, True, requests, repeats, warm=300))
    memory = statistics.median(found["memory"])
    lines = [
        f"Whole streamed requests, µs of process CPU each ({requests} per repeat, best of {repeats}; {rounds} "
        f"interleaved rounds; hiredis installed: {HIREDIS_AVAILABLE}):",
        "",
        "| variant | median | rounds | median over memory |",
        "|---|---|---|---|",
    ]
    for label, values in found.items():
        median = statistics.median(values)
        shown = ", ".join(f"{v:.0f}" for v in values)
        lines.append(f"| {label} | {median:.1f} | {shown} | {median - memory:+.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="whole requests per repeat (2000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per round, best of (3)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (4)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-ab-") as workdir:
        server = RedisServer(Path(workdir) / "redis").start()
        try:
            with open(Path(workdir) / "access.log", "w") as log_stream:
                configure_access_log(log_stream)  # the requests' lines, as `gateway serve` writes them
                print(uvloop.run(table(server, args.requests, args.repeats, args.rounds)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
