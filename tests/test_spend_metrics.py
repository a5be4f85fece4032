"""``SpendMetrics.booked``: the spend counter's values, whether its series are bound once or looked up per booking."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.admission.spending.metrics import SpendMetrics
from gateway.admission.spending.store import Booking
from gateway.admission.spending.windows import to_nanos


def _spent(registry: CollectorRegistry, key: str, team: str, model: str, provider: str) -> float | None:
    labels = {"key": key, "team": team, "model": model, "provider": provider}
    return registry.get_sample_value("gateway_spend_usd_total", labels)


def test_bookings_add_up_per_label_set_named_or_not() -> None:
    registry = CollectorRegistry()
    metrics = SpendMetrics(registry)
    a = Booking("k1", "t", "m", "p", "d1", to_nanos(0.25))
    b = Booking("k2", "t", "m", "q", "d2", to_nanos(0.5))
    metrics.booked("alice", "t", [a, a])
    metrics.booked("alice", "t", [b])
    assert _spent(registry, "", "", "m", "p") == 0.5  # unnamed: no key or team on the series
    assert _spent(registry, "", "", "m", "q") == 0.5
    assert _spent(registry, "alice", "t", "m", "p") is None

    metrics.named = True
    metrics.booked("alice", "t", [a])
    metrics.booked("bob", "t", [a])
    assert _spent(registry, "alice", "t", "m", "p") == 0.25
    assert _spent(registry, "bob", "t", "m", "p") == 0.25
    assert _spent(registry, "", "", "m", "p") == 0.5  # unchanged by named bookings

    metrics.named = False
    metrics.booked("alice", "t", [a])
    assert _spent(registry, "", "", "m", "p") == 0.75
    # /metrics opened by a reload: no series names a key or a team any more (an open scrape would show them).
    assert _spent(registry, "alice", "t", "m", "p") is None and _spent(registry, "bob", "t", "m", "p") is None
