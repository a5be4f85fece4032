"""What happens to requests, told once: one events interface for metrics, logs and tests.

The router and the relay report each event to a ``GatewayEvents`` as it happens; nothing else
carries them. ``Metrics`` implements the interface directly (counters and gauges), and
``EventFanout`` hands every event to several listeners: the app gives the metrics first, then
whatever the caller passed in ``AppOptions.events`` (a test's ``EventLog``, a log shipper)::

    event                    told by                  when
    decision                 router.plan              a request's first choice is made
    attempt_started / _ended relay (runner)           an upstream attempt takes / frees its slot
    committed                relay (runner)           the client's answer will come from this deployment
    fallback                 relay (attempt loops)    an attempt failed before the first byte; the next is tried
                                                      (``next_deployment`` the same one: a retry)
    hedge_started            relay (hedged race)      the first token was late: a second attempt started beside it
    hedge_ended              relay (hedged race)      one attempt of a hedged race ended, ``won`` or ``lost``
    stream_broke             relay (replies)          a stream broke mid-answer, then ``recovered`` or ``failed``
    malformed_stream         relay (replies)          a stream completed with an event that was not valid JSON
    circuit_changed          router (health)          a deployment's circuit opened, went half-open or closed
    queue_entered / _left    relay (runner)           every candidate was full: a request waits for a slot / stops
    session_routed           router.plan              a session's request stayed on its deployment, moved, ...
    cache_used               relay (runner)           an answer's prompt was partly served from the provider's cache
    session_bound            relay (runner)           a session's answer completed: its next turn is bound there

Each event names the client-facing ``model``, the ``deployment`` (its name within the model) and
the ``provider`` serving it, so a listener labels by whichever it needs. Every method is called
on the event loop and must neither block nor raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.types import AffinityChoice, BreakResult, CircuitState, HedgeResult, QueueOutcome, RouteReason


class GatewayEvents(Protocol):
    def decision(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        """The router's first choice for a request (before any attempt)."""

    def attempt_started(self, model: str, deployment: str, provider: str) -> None:
        """An upstream attempt was admitted and is about to be sent."""

    def attempt_ended(self, model: str, deployment: str, provider: str) -> None:
        """An admitted attempt ended (answered, failed or cancelled); its slot is free."""

    def committed(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        """The client's answer comes from this deployment (its first token arrived, or its whole body)."""

    def fallback(self, model: str, deployment: str, provider: str, next_deployment: str) -> None:
        """An attempt at ``deployment`` failed before its first byte; ``next_deployment`` is tried next."""

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        """The primary's first token was late: a second attempt (``hedge``) started beside it."""

    def hedge_ended(self, model: str, deployment: str, provider: str, result: HedgeResult, is_hedge: bool) -> None:
        """One attempt of a hedged race ended; ``is_hedge``: it was the second attempt, not the primary."""

    def stream_broke(self, model: str, deployment: str, provider: str, result: BreakResult) -> None:
        """The stream from ``deployment`` broke after part of the answer reached the client."""

    def malformed_stream(self, model: str, deployment: str, provider: str) -> None:
        """A stream completed although one of its events was not valid JSON (not a health failure), or an attempt
        failed for one before its first output (``gateway.relay.first_token``)."""

    def circuit_changed(self, model: str, deployment: str, provider: str, state: CircuitState) -> None:
        """A deployment's circuit opened, went half-open, or closed."""

    def queue_entered(self, model: str) -> None:
        """Every candidate of a request for ``model`` was full: it waits for a slot."""

    def queue_left(self, model: str, waited_s: float, outcome: QueueOutcome) -> None:
        """A request stopped waiting (``full``: it never joined, past the length bound)."""

    def session_routed(self, model: str, deployment: str, choice: AffinityChoice, reason: str | None) -> None:
        """A request of a session was routed: it stayed where its prompt is cached, moved (``reason``), ..."""

    def cache_used(self, model: str, deployment: str, cached_tokens: int, saved_usd: float, saved_s: float) -> None:
        """An answer's provider reported ``cached_tokens`` prompt tokens from its cache: what that saved (estimated)."""

    def session_bound(self, model: str, deployment: str) -> None:
        """A session's answer completed on ``deployment``: its next turn is bound there."""


class NoEvents:
    """Hears every event and does nothing; a base for listeners that care about a few."""

    def decision(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        pass

    def attempt_started(self, model: str, deployment: str, provider: str) -> None:
        pass

    def attempt_ended(self, model: str, deployment: str, provider: str) -> None:
        pass

    def committed(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        pass

    def fallback(self, model: str, deployment: str, provider: str, next_deployment: str) -> None:
        pass

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        pass

    def hedge_ended(self, model: str, deployment: str, provider: str, result: HedgeResult, is_hedge: bool) -> None:
        pass

    def stream_broke(self, model: str, deployment: str, provider: str, result: BreakResult) -> None:
        pass

    def malformed_stream(self, model: str, deployment: str, provider: str) -> None:
        pass

    def circuit_changed(self, model: str, deployment: str, provider: str, state: CircuitState) -> None:
        pass

    def queue_entered(self, model: str) -> None:
        pass

    def queue_left(self, model: str, waited_s: float, outcome: QueueOutcome) -> None:
        pass

    def session_routed(self, model: str, deployment: str, choice: AffinityChoice, reason: str | None) -> None:
        pass

    def cache_used(self, model: str, deployment: str, cached_tokens: int, saved_usd: float, saved_s: float) -> None:
        pass

    def session_bound(self, model: str, deployment: str) -> None:
        pass


class EventFanout:
    """Hands each event to every listener, in order."""

    def __init__(self, listeners: Sequence[GatewayEvents]) -> None:
        self.listeners = tuple(listeners)

    def decision(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        for listener in self.listeners:
            listener.decision(model, deployment, provider, reason)

    def attempt_started(self, model: str, deployment: str, provider: str) -> None:
        for listener in self.listeners:
            listener.attempt_started(model, deployment, provider)

    def attempt_ended(self, model: str, deployment: str, provider: str) -> None:
        for listener in self.listeners:
            listener.attempt_ended(model, deployment, provider)

    def committed(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        for listener in self.listeners:
            listener.committed(model, deployment, provider, reason)

    def fallback(self, model: str, deployment: str, provider: str, next_deployment: str) -> None:
        for listener in self.listeners:
            listener.fallback(model, deployment, provider, next_deployment)

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        for listener in self.listeners:
            listener.hedge_started(model, primary, hedge)

    def hedge_ended(self, model: str, deployment: str, provider: str, result: HedgeResult, is_hedge: bool) -> None:
        for listener in self.listeners:
            listener.hedge_ended(model, deployment, provider, result, is_hedge)

    def stream_broke(self, model: str, deployment: str, provider: str, result: BreakResult) -> None:
        for listener in self.listeners:
            listener.stream_broke(model, deployment, provider, result)

    def malformed_stream(self, model: str, deployment: str, provider: str) -> None:
        for listener in self.listeners:
            listener.malformed_stream(model, deployment, provider)

    def circuit_changed(self, model: str, deployment: str, provider: str, state: CircuitState) -> None:
        for listener in self.listeners:
            listener.circuit_changed(model, deployment, provider, state)

    def queue_entered(self, model: str) -> None:
        for listener in self.listeners:
            listener.queue_entered(model)

    def queue_left(self, model: str, waited_s: float, outcome: QueueOutcome) -> None:
        for listener in self.listeners:
            listener.queue_left(model, waited_s, outcome)

    def session_routed(self, model: str, deployment: str, choice: AffinityChoice, reason: str | None) -> None:
        for listener in self.listeners:
            listener.session_routed(model, deployment, choice, reason)

    def cache_used(self, model: str, deployment: str, cached_tokens: int, saved_usd: float, saved_s: float) -> None:
        for listener in self.listeners:
            listener.cache_used(model, deployment, cached_tokens, saved_usd, saved_s)

    def session_bound(self, model: str, deployment: str) -> None:
        for listener in self.listeners:
            listener.session_bound(model, deployment)


class EventLog(NoEvents):
    """Keeps the routing events as tuples, for tests and the demo to read ``events``::

    ("decision", model, deployment, reason)     ("fallback", model, failed, next_deployment)
    ("hedge_started", model, primary, hedge)    ("hedge_won", model, hedge) / ("hedge_lost", model, hedge)
    ("circuit", model, deployment, state)       ("stream_broke", model, deployment, result)
    ("queue_left", model, outcome)
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def decision(self, model: str, deployment: str, provider: str, reason: RouteReason) -> None:
        self.events.append(("decision", model, deployment, reason))

    def fallback(self, model: str, deployment: str, provider: str, next_deployment: str) -> None:
        self.events.append(("fallback", model, deployment, next_deployment))

    def hedge_started(self, model: str, primary: str, hedge: str) -> None:
        self.events.append(("hedge_started", model, primary, hedge))

    def hedge_ended(self, model: str, deployment: str, provider: str, result: HedgeResult, is_hedge: bool) -> None:
        if is_hedge:
            self.events.append((f"hedge_{result}", model, deployment))

    def stream_broke(self, model: str, deployment: str, provider: str, result: BreakResult) -> None:
        self.events.append(("stream_broke", model, deployment, result))

    def circuit_changed(self, model: str, deployment: str, provider: str, state: CircuitState) -> None:
        self.events.append(("circuit", model, deployment, state))

    def queue_left(self, model: str, waited_s: float, outcome: QueueOutcome) -> None:
        self.events.append(("queue_left", model, outcome))
