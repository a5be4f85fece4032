"""Aliases shared across the gateway's layers, in one place (as ``starlette.types`` is for ASGI).

The ASGI aliases themselves come from ``starlette.types``; this module holds the gateway's own:
the clock every timed component takes, the key of a deployment's measurements and state, and
the small vocabularies that routing, the relay and the metrics all speak. It imports nothing of
the gateway, so any module may import it without creating a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

Clock = Callable[[], float]
"""A monotonic clock in seconds (``time.perf_counter`` by default); injected so tests control time."""


class StreamProgress(Protocol):
    """What an attempt's stream has delivered so far (the relay's meter): its bytes, counted as they arrive.
    The router reads it while the stream runs, to see a provider slow down before its answers end."""

    @property
    def received_bytes(self) -> int: ...

    @property
    def api(self) -> str:
        """The stream's API (``chat``, ``responses``, ``messages``...): its events' envelope is its own."""
        ...


InputKind = Literal["image", "audio"]
"""A kind of input a deployment may refuse (llama.cpp without its projector refuses images): learned per
deployment by the router, and carried by the requests that hold it."""

DeploymentKey = tuple[str, str]
"""``(model, deployment)``: the client-facing model name and the deployment's name within it.
It keys a deployment's stats, circuit, in-flight count and recent answers."""

RouteReason = Literal["best-score", "explore", "fallback", "hedge", "override", "recovered", "overflow", "affinity"]
"""Why the deployment that answered was the one; ``recovered``: it finished a stream that broke elsewhere;
``overflow``: a better-ranked one was full (at its concurrency limit), and this one had room; ``affinity``:
its session's prompt is cached there, and staying won."""

AffinityChoice = Literal["stay", "move", "new", "unknown", "off"]
"""What the router did with a session: stayed on its deployment, moved off it, routed a session bound nowhere
yet, routed one whose binding could not be read (as if it had none), or ignored it (``affinity = "off"``, the
``x-gateway-affinity: off`` header, or the request's ``provider.order`` / ``only``)."""
AFFINITY_CHOICES: tuple[AffinityChoice, ...] = ("stay", "move", "new", "unknown", "off")
MoveReason = Literal["slower", "unavailable", "excluded"]
"""Why a session left its deployment: staying no longer won (it slowed, failed, or another got much better);
its circuit is open or it is full; or the request or config ruled it out (a filter, an API it does not speak)."""
MOVE_REASONS: tuple[MoveReason, ...] = ("slower", "unavailable", "excluded")

CircuitState = Literal["closed", "open", "half_open"]
"""A deployment's circuit (``gateway.routing.health``); also the ``state`` label of ``gateway_circuit_state``."""
CIRCUIT_STATES: tuple[CircuitState, ...] = ("closed", "half_open", "open")

HedgeResult = Literal["won", "lost"]
"""How a hedged attempt ended: it answered (``won``), or it was cancelled for the other (``lost``)."""

BreakResult = Literal["recovered", "failed"]
"""What followed a stream's break: another deployment finished the answer, or the stream ended in error."""

QueueOutcome = Literal["served", "timeout", "full", "gone"]
"""How a request's wait for a slot ended (``gateway.relay.queue``): it got one; its wait bound (or its
deadline) passed; the queue was at its length bound, so it never joined; the client hung up."""
