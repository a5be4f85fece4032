"""Routing: which deployments a request is tried on, in what order, and why.

The attempt loop (``gateway.relay``) consumes only a ``RoutePlan``: an ordered list of
candidates. The router reads configuration and a stats snapshot; it knows nothing of HTTP.
"""

from gateway.routing.health import RouterState
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences, parse_preferences, split_model_suffix
from gateway.routing.plan import Candidate, RoutePlan, Router, RouteRequest
from gateway.routing.router import MeasuredRouter, Ranked, Ranking

__all__ = [
    "NO_PREFERENCES",
    "Candidate",
    "MeasuredRouter",
    "ProviderPreferences",
    "Ranked",
    "Ranking",
    "RoutePlan",
    "RouteRequest",
    "Router",
    "RouterState",
    "parse_preferences",
    "split_model_suffix",
]
