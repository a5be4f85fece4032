"""Prometheus series of spend and budgets, by key name and team (from the config, never a key).

Labels stay bounded: keys and teams come from the keys file, models and providers from the config.
Key and team names are shown only where ``/metrics`` needs a key (``[server] metrics_key_env``,
``named``): an open ``/metrics`` has spend by model and provider, with empty ``key`` and ``team``,
and no budget series (each names its key or team).
``gateway_spend_usd_total`` counts what this replica booked (sum it over replicas); the budget
gauges are read from the store at scrape time, so with Redis they show every replica's spend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.admission.spending.store import Balance, Booking
from gateway.admission.spending.windows import NANOS_PER_USD, to_usd
from gateway.metrics.children import plain_children

_BUDGET_LABELS = ("scope", "name", "window")


class SpendMetrics:
    """Registered in the gateway's own registry by ``gateway.metrics.series.Metrics``."""

    def __init__(self, registry: CollectorRegistry, counter_class: type[Counter] = Counter) -> None:
        """``counter_class``: the gateway's own (``Metrics.counter_class``: plain values in one process, as its
        other counters; prometheus-client's under ``--workers``)."""
        self.spend = counter_class(
            "gateway_spend_usd",
            "Cost booked to client keys, at configured prices, by key name, team, model and provider",
            ["key", "team", "model", "provider"],
            registry=registry,
        )
        self.refusals = Counter(
            "gateway_budget_refusals",
            "Requests refused because a key's or team's budget could not hold their worst case",
            ["scope", "name"],
            registry=registry,
        )
        # Under --workers every worker reads the same shared balances: the host's scrape shows the
        # newest reading of a live worker, never one per process or a dead worker's stale one.
        mode: Final = "livemostrecent"
        self.limit = Gauge(
            "gateway_budget_limit_usd",
            "A budget's limit per window",
            _BUDGET_LABELS,
            registry=registry,
            multiprocess_mode=mode,
        )
        self.spent = Gauge(
            "gateway_budget_spent_usd",
            "Spent in the budget's current window",
            _BUDGET_LABELS,
            registry=registry,
            multiprocess_mode=mode,
        )
        self.reserved = Gauge(
            "gateway_budget_reserved_usd",
            "Held by requests in flight",
            _BUDGET_LABELS,
            registry=registry,
            multiprocess_mode=mode,
        )
        self.remaining = Gauge(
            "gateway_budget_remaining_usd",
            "Limit minus spent minus reserved, in the current window",
            _BUDGET_LABELS,
            registry=registry,
            multiprocess_mode=mode,
        )
        self._series: set[tuple[str, str, str]] = set()
        self._spend_children: dict[tuple[str, str, str, str], Counter] = {}
        """``spend``'s series by label values, bound once: ``labels`` validates and locks on every call, and a
        settlement books every request. The series are never removed, and the labels stay bounded (above)."""
        self._plain = plain_children(self.spend)
        """``spend``'s values are plain: ``booked`` adds to them itself."""
        self._named = False
        self._named_refusals: set[tuple[str, str]] = set()
        """``refusals``' series that name a key or a team."""

    @property
    def named(self) -> bool:
        """Key and team names may be shown (``/metrics`` needs a key): set from the config at each (re)load."""
        return self._named

    @named.setter
    def named(self, named: bool) -> None:
        if self._named and not named:
            # A reload opened /metrics: the series that name a key or a team go, or an open scrape would show them
            # (the spend goes on under empty names; the budget gauges go at the next scrape, ``observe_balances``).
            for labels in [labels for labels in self._spend_children if labels[0] or labels[1]]:
                del self._spend_children[labels]
                self.spend.remove(*labels)
            for refused in self._named_refusals:
                self.refusals.remove(*refused)
            self._named_refusals.clear()
        self._named = named

    def booked(self, key: str, team: str, bookings: Sequence[Booking]) -> None:
        if not self._named:
            key = team = ""
        children, plain = self._spend_children, self._plain
        for booking in bookings:
            labels = (key, team, booking.model, booking.provider)
            child = children.get(labels)
            if child is None:
                child = children[labels] = self.spend.labels(*labels)
            amount = booking.cost / NANOS_PER_USD  # to_usd, inline
            if plain and amount >= 0:
                child._value._value += amount  # ``inc(amount)`` of a plain counter (``gateway.metrics.children``)
            else:
                child.inc(amount)

    def refused(self, scope: str, name: str) -> None:
        if self._named:
            self._named_refusals.add((scope, name))
        self.refusals.labels(scope, name if self._named else "").inc()

    def observe_balances(self, balances: Sequence[Balance]) -> None:
        seen: set[tuple[str, str, str]] = set()
        for balance in balances if self._named else ():
            scope = balance.held.scope
            labels = (scope.kind, scope.name, scope.budget.window)
            seen.add(labels)
            self.limit.labels(*labels).set(scope.budget.limit_usd)
            self.spent.labels(*labels).set(to_usd(balance.spent))
            self.reserved.labels(*labels).set(to_usd(balance.reserved))
            self.remaining.labels(*labels).set(to_usd(balance.remaining))
        for gone in self._series - seen:
            for gauge in (self.limit, self.spent, self.reserved, self.remaining):
                try:
                    gauge.remove(*gone)
                except KeyError:
                    pass  # never set
        self._series = seen
