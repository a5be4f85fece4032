"""Routing events, for metrics and logs: a small Protocol and a default that does nothing.

The router and the attempt loop call these at each decision; a Prometheus exporter (or a
test) implements the Protocol and is passed in ``AppOptions.observer``. Every method is
called on the event loop and must neither block nor raise.
"""

from __future__ import annotations

from typing import Protocol

from gateway.routing.health import CircuitState
from gateway.routing.plan import RouteReason


class RoutingObserver(Protocol):
    def decision(self, model: str, deployment: str, reason: RouteReason) -> None:
        """A request's first choice was made (before any attempt)."""

    def fallback(self, model: str, failed: str, next_deployment: str) -> None:
        """An attempt failed before its first byte and the next candidate is being tried."""

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        """The primary's first token was late: a second attempt started beside it."""

    def hedge_won(self, model: str, hedge: str) -> None:
        """The hedge produced the first token; the primary was cancelled."""

    def hedge_lost(self, model: str, hedge: str) -> None:
        """The primary produced the first token after all; the hedge was cancelled."""

    def circuit_changed(self, model: str, deployment: str, state: CircuitState) -> None:
        """A deployment's circuit opened, went half-open, or closed."""


class NullObserver:
    """The default: hears everything, does nothing."""

    def decision(self, model: str, deployment: str, reason: RouteReason) -> None:
        pass

    def fallback(self, model: str, failed: str, next_deployment: str) -> None:
        pass

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        pass

    def hedge_won(self, model: str, hedge: str) -> None:
        pass

    def hedge_lost(self, model: str, hedge: str) -> None:
        pass

    def circuit_changed(self, model: str, deployment: str, state: CircuitState) -> None:
        pass


class EventLog:
    """An observer that keeps every event as a tuple; tests and the demo read ``events``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def decision(self, model: str, deployment: str, reason: RouteReason) -> None:
        self.events.append(("decision", model, deployment, reason))

    def fallback(self, model: str, failed: str, next_deployment: str) -> None:
        self.events.append(("fallback", model, failed, next_deployment))

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        self.events.append(("hedge_started", model, primary, hedge))

    def hedge_won(self, model: str, hedge: str) -> None:
        self.events.append(("hedge_won", model, hedge))

    def hedge_lost(self, model: str, hedge: str) -> None:
        self.events.append(("hedge_lost", model, hedge))

    def circuit_changed(self, model: str, deployment: str, state: CircuitState) -> None:
        self.events.append(("circuit", model, deployment, state))
