"""What the gateway's Redis stores read back after a fixed set of writes, as JSON, and the reply parser that read it.

Why: redis-py parses replies with hiredis (C) where it is installed, else with its own Python parser; the gateway
must read the same with either. ``tests/test_redis_parser.py`` runs this once as it is and once with hiredis
hidden (``--no-hiredis``, before redis-py is imported), each in a process of its own, and compares the two.

    python -m tests.support.redis_round_trip redis://127.0.0.1:6379/0 PREFIX [--no-hiredis]
"""

from __future__ import annotations

import sys

if "--no-hiredis" in sys.argv:
    sys.modules["hiredis"] = None  # type: ignore[assignment]  # import fails: redis-py falls back

import asyncio
import json
import math
from dataclasses import replace
from typing import Any

from gateway.admission.spending import Budget, Spender, SpendLedger
from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.config import StatsConfig
from gateway.redis_client import RedisClient, RedisConnections
from gateway.stats import RedisStatsStore
from gateway.stats.snapshot import METRICS
from tests.support.samples import make_sample


async def parser_of(client: RedisClient) -> str:
    """The class name of the reply parser on one of ``client``'s connections."""
    pool: Any = client.connection_pool  # type: ignore[union-attr]  # a single server: a plain pool
    connection = await pool.get_connection()
    try:
        return type(connection._parser).__name__
    finally:
        await pool.release(connection)


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


async def stats(url: str, prefix: str) -> dict[str, Any]:
    """200 varied samples through one store, read back from Redis by a second one (its view is all Redis's)."""
    config = StatsConfig(backend="redis", redis_url=url, key_prefix=prefix)
    writer = RedisStatsStore(config, redis=RedisConnections(config, {}))
    await writer.start()
    for index in range(200):
        writer.record(
            make_sample(
                deployment="de"[index % 2],
                outcome="ok" if index % 9 else "upstream_error",
                ttft_s=0.05 + (index % 17) * 0.031,
                tokens_per_s=20.0 + (index % 13) * 7.5,
                e2e_s=0.5 + (index % 11) * 0.2,
                output_tokens=10 + index % 40,
            )
        )
    await writer.sync()
    history = await writer.history([("m", "d"), ("m", "e")])
    await writer.aclose()
    assert writer.redis is not None
    await writer.redis.aclose()
    reader_connections = RedisConnections(config, {})
    reader = RedisStatsStore(config, redis=reader_connections)
    await reader.start()
    parser = await parser_of(reader_connections.background())
    summaries: dict[str, Any] = {}
    for deployment in ("d", "e"):
        summary = reader.snapshot().get("m", deployment)
        assert summary is not None
        summaries[deployment] = {
            "outcomes": dict(sorted(summary.outcomes.items())),
            "quantiles": {m: [_number(summary.quantile(m, q)) for q in (0.5, 0.9, 0.99)] for m in METRICS},
            "histograms": {m: sorted(h.counts.items()) for m, h in sorted(summary.histograms.items())},
        }
    await reader.aclose()
    await reader_connections.aclose()
    points = {f"{m}/{d}": [(p.samples, p.ttft_p50_s, p.tokens_per_s_p50) for p in ps] for (m, d), ps in history.items()}
    return {"parser": parser, "summaries": summaries, "history": points}


async def spend(url: str, prefix: str) -> dict[str, Any]:
    """Holds taken, settled (queued and flushed, as a request does), refused; then balances and rows read back."""
    config = StatsConfig(backend="redis", redis_url=url, key_prefix=prefix)
    connections = RedisConnections(config, {})
    ledger = SpendLedger(RedisSpendStore.from_config(config, connections))
    budgeted = Spender.of("k1", "ann", "blue", Budget(0.01, "day"), Budget(1.0, "month"))
    plain = Spender.of("k2", "ben", None, None, None)
    refused = 0
    for index in range(12):
        try:
            hold = await ledger.reserve(budgeted, 0.002, 60.0)
        except Exception:
            refused += 1
            continue
        attempts = [replace(make_sample(deployment="de"[i]), cost_usd=0.0007 * (index % 3)) for i in range(index % 3)]
        ledger.settle_now(budgeted, hold, attempts)
        ledger.settle_now(plain, None, [replace(make_sample(deployment="d"), cost_usd=0.00001 * index)])
    await ledger.store.flushed()
    balances = [(b.held.scope.kind, b.spent, b.reserved) for b in await ledger.balances([budgeted, plain])]
    rows = []
    for tags in ([budgeted.tag], [plain.tag]):
        _, found = await ledger.rows("day", tags)
        rows += sorted((r.key_id, r.model, r.deployment, r.cost, r.attempts) for r in found)
    parser = await parser_of(connections.requests())
    await ledger.store.aclose()
    await connections.aclose()
    return {"parser": parser, "refused": refused, "balances": balances, "rows": rows}


async def main(url: str, prefix: str) -> dict[str, Any]:
    return {"stats": await stats(url, f"{prefix}s"), "spend": await spend(url, f"{prefix}p")}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
