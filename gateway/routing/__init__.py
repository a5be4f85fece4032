"""Routing: which deployments a request is tried on, in what order, and why.

The attempt loop (``gateway.relay``) consumes only a ``RoutePlan``: an ordered list of
candidates. The router reads configuration and a stats snapshot; it knows nothing of HTTP.
"""

from gateway.routing.health import CircuitState, RouterState
from gateway.routing.observer import EventLog, NullObserver, RoutingObserver
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences, parse_preferences, split_model_suffix
from gateway.routing.plan import Candidate, RoutePlan, Router, RouteReason, RouteRequest
from gateway.routing.router import MeasuredRouter, Ranked, Ranking

__all__ = [
    "NO_PREFERENCES",
    "Candidate",
    "CircuitState",
    "EventLog",
    "MeasuredRouter",
    "NullObserver",
    "ProviderPreferences",
    "Ranked",
    "Ranking",
    "RoutePlan",
    "RouteReason",
    "RouteRequest",
    "Router",
    "RouterState",
    "RoutingObserver",
    "parse_preferences",
    "split_model_suffix",
]
