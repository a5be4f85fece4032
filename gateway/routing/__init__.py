"""Routing: which deployments a request is tried on, in what order, and why.

The attempt loop (``gateway.relay``) consumes only a ``RoutePlan``: an ordered list of
candidates. The router reads configuration and a stats snapshot; it knows nothing of HTTP.
"""

from gateway.routing.plan import Candidate, OrderedRouter, RoutePlan, Router, RouteReason, RouteRequest

__all__ = ["Candidate", "OrderedRouter", "RoutePlan", "RouteReason", "RouteRequest", "Router"]
