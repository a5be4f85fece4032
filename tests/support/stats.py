"""Reading what a stats store holds: a snapshot's sample counts, and the raw counts in Redis.

Why: the stats tests check that samples arrive, once each, in memory and in Redis; these read
the numbers without going through the store under test.
"""

from __future__ import annotations

import redis

from gateway.stats import StatsSnapshot


def samples_of(snapshot: StatsSnapshot, model: str = "m", deployment: str = "d") -> int:
    """Samples of one deployment in a snapshot (0 when it has none)."""
    summary = snapshot.get(model, deployment)
    return 0 if summary is None else summary.samples


def total_outcomes(client: redis.Redis, prefix: str) -> int:
    """Samples stored in Redis under ``prefix``: every slice's outcome counts, summed (the minutes of the
    dashboard's history, ``{...}:m:<minute>``, hold the same samples again and are left out, as is the list of
    answers one by one, ``{...}:answers``, as are the session bindings, ``{<prefix>:bind:...}``)."""
    total = 0
    for key in client.scan_iter(f"{{{prefix}:*"):
        if "}:m:" in str(key) or str(key).endswith("}:answers") or client.type(str(key)) != "hash":
            continue
        fields = client.hgetall(str(key))
        total += sum(int(v) for f, v in fields.items() if str(f).startswith("outcome:"))
    return total
