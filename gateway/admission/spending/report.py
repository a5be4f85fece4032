"""Where the money went: the document of ``GET /v1/gateway/spend`` and the table of ``gateway spend``.

Rows are cost and attempts per (key, team, model, provider, deployment) over one period of a
window, or summed over whichever of those the caller leaves out of ``by``. Keys are shown by
their name from the keys file (a key that is no longer configured, by its key id): never the key.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.admission.spending.store import Balance, SpendRow
from gateway.admission.spending.windows import Period, iso_time, to_usd
from gateway.tables import format_table

DIMENSIONS = ("key", "team", "model", "provider", "deployment")


def parse_by(raw: str | None) -> tuple[str, ...]:
    """The ``by`` parameter: a comma-separated subset of ``DIMENSIONS`` (all of them by default)."""
    if not raw:
        return DIMENSIONS
    wanted = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = [part for part in wanted if part not in DIMENSIONS]
    if unknown or not wanted:
        raise ValueError(f"'by' takes a comma-separated list of {', '.join(DIMENSIONS)}; got {raw!r}")
    return tuple(d for d in DIMENSIONS if d in wanted)


def grouped_rows(rows: Sequence[SpendRow], names: Mapping[str, str], by: Sequence[str]) -> list[dict[str, Any]]:
    """Rows summed over the dimensions not in ``by``, dearest first."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for row in rows:
        values = {
            "key": names.get(row.key_id, row.key_id),
            "team": row.team,
            "model": row.model,
            "provider": row.provider,
            "deployment": row.deployment,
        }
        group = groups.setdefault(tuple(values[d] for d in by), [0, 0])
        group[0] += row.cost
        group[1] += row.attempts
    ordered = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))
    return [
        {**dict(zip(by, values, strict=True)), "cost_usd": to_usd(cost), "attempts": attempts}
        for values, (cost, attempts) in ordered
    ]


def budget_json(balance: Balance, teams: Mapping[str, str]) -> dict[str, Any]:
    scope, period = balance.held.scope, balance.held.period
    return {
        "scope": scope.kind,
        "name": scope.name,
        "team": teams.get(scope.ident) if scope.kind == "key" else scope.name,
        "window": scope.budget.window,
        "period": period.id,
        "limit_usd": scope.budget.limit_usd,
        "spent_usd": to_usd(balance.spent),
        "reserved_usd": to_usd(balance.reserved),
        "remaining_usd": to_usd(balance.remaining),
        "resets_at": period.resets_iso,
    }


def spend_document(
    period: Period,
    rows: list[dict[str, Any]],
    budgets: list[dict[str, Any]],
    backend: str,
    degraded: str | None,
) -> dict[str, Any]:
    return {
        "object": "spend",
        "window": period.window,
        "period": period.id,
        "starts_at": iso_time(period.starts_at),
        "resets_at": period.resets_iso,
        "backend": backend,
        "degraded": degraded,
        "total_usd": sum(r["cost_usd"] for r in rows),
        "data": rows,
        "budgets": budgets,
    }


def render_table(document: Mapping[str, Any]) -> str:
    """The spend document as two fixed-width tables: the rows, then the budgets."""
    rows = document["data"]
    dims = [d for d in DIMENSIONS if rows and d in rows[0]] or list(DIMENSIONS)
    lines = [
        f"spend per {document['window']} {document['period']} (resets {document['resets_at']}), "
        f"{document['backend']} store: total ${document['total_usd']:.6f}"
    ]
    body = [[str(r[d]) for d in dims] + [f"{r['cost_usd']:.6f}", str(r["attempts"])] for r in rows]
    lines.append(format_table([*dims, "cost $", "attempts"], body) if body else "  (nothing spent yet)")
    budgets = document["budgets"]
    if budgets:
        header = ["budget", "name", "window", "limit $", "spent $", "reserved $", "remaining $", "resets at"]
        table = [
            [
                b["scope"],
                b["name"],
                b["window"],
                f"{b['limit_usd']:g}",
                f"{b['spent_usd']:.6f}",
                f"{b['reserved_usd']:.6f}",
                f"{b['remaining_usd']:.6f}",
                b["resets_at"],
            ]
            for b in budgets
        ]
        lines.extend(["", format_table(header, table)])
    return "\n".join(lines)


def render_csv(document: Mapping[str, Any]) -> str:
    """The rows as CSV (raw values), one header line first."""
    rows = document["data"]
    dims = [d for d in DIMENSIONS if rows and d in rows[0]] or list(DIMENSIONS)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["window", "period", *dims, "cost_usd", "attempts"])
    for r in rows:
        writer.writerow([document["window"], document["period"], *(r[d] for d in dims), r["cost_usd"], r["attempts"]])
    return out.getvalue()
