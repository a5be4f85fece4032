"""Every metric the gateway exports is in ``deploy/README.md``'s table, with its labels, and the table names none
it does not export: the page that says "the full list" is the full list.

The families, their types and label names are those a fresh ``Metrics`` declares (what ``/metrics`` renders,
series or not yet). A row may abbreviate names that share a prefix (`` `gateway_budget_limit_usd`,
`_spent_usd` ``): a name starting with ``_`` continues the row's first name's ``gateway_<word>``. The fields of
``GET /v1/gateway/stats`` are named likewise in ``docs/watching.md``.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args

from gateway.leaderboard import LeaderboardRow
from gateway.metrics.attempts import STATUS_CLASSES
from gateway.metrics.series import Metrics
from gateway.samples import VALIDITIES, Outcome
from gateway.types import CircuitState, RouteReason

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "deploy" / "README.md"
ROW = re.compile(r"^\| (`[^|]+) \|\s*(\w*)\s*\|([^|]*)\|", re.MULTILINE)


def documented() -> dict[str, tuple[str, set[str]]]:
    """Each name in the table's first column → (its type, its labels)."""
    rows: dict[str, tuple[str, set[str]]] = {}
    for names, kind, labels in ROW.findall(README.read_text(encoding="utf-8")):
        listed = re.findall(r"`([a-z_*]+)`", names)
        prefix = "_".join(listed[0].split("_")[:2])
        label_set = {label.strip() for label in labels.split(",") if label.strip()}
        for name in listed:
            rows[prefix + name if name.startswith("_") else name] = (kind, label_set)
    return rows


def _family(name: str) -> str:
    return name.removesuffix("_total")


def declared() -> dict[str, tuple[str, set[str]]]:
    """Each family the gateway registers → (its type, its label names)."""
    families: dict[str, tuple[str, set[str]]] = {}
    collectors: list[Any] = list(Metrics().registry._collector_to_names)  # the registry's own list of what it renders
    for collector in collectors:
        name = getattr(collector, "_name", None)
        if name is not None:
            families[name] = (collector._type, set(collector._labelnames))
    return families


def test_the_metrics_table_lists_every_exported_family_with_its_labels() -> None:
    table = documented()
    by_family = {_family(name): value for name, value in table.items() if name.startswith("gateway_")}
    exported = {name: value for name, value in declared().items() if name.startswith("gateway_")}
    assert len(exported) >= 50
    missing = sorted(set(exported) - set(by_family))
    assert not missing, f"exported but not in deploy/README.md: {missing}"
    stale = sorted(set(by_family) - set(exported))
    assert not stale, f"in deploy/README.md but not exported: {stale}"
    wrong = {name: (by_family[name], value) for name, value in exported.items() if by_family[name] != value}
    assert not wrong, f"type or labels differ (README, exported): {wrong}"
    assert "process_*" in table


def _row_of(name: str) -> str:
    (row,) = [line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith(f"| `{name}`")]
    return row


def test_the_table_names_every_value_of_the_bounded_labels() -> None:
    """A label whose values the code fixes (a ``Literal``) lists them all: a user filters on what the table says."""
    bounded = {
        "gateway_routing_decisions_total": get_args(RouteReason),
        "gateway_upstream_requests_total": get_args(Outcome),
        "gateway_requests_total": STATUS_CLASSES,
        "gateway_circuit_state": get_args(CircuitState),
        "gateway_invalid_answers_total": VALIDITIES[1:],
    }
    missing = {
        name: [value for value in values if f"`{value}`" not in _row_of(name)] for name, values in bounded.items()
    }
    assert not any(missing.values()), missing


def test_the_stats_fields_are_named_in_the_watching_page() -> None:
    page = (ROOT / "docs" / "watching.md").read_text(encoding="utf-8")
    skipped = {"model", "deployment", "provider", "apis", "price_in", "price_out", "price_cached_in"}
    skipped |= {"valid_rate_tools", "valid_rate_json", "valid_rate_plain"}  # "and per kind"
    missing = [f.name for f in fields(LeaderboardRow) if f.name not in skipped and f"`{f.name}`" not in page]
    assert not missing, missing
