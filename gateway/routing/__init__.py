"""Routing: which deployments a request is tried on, in what order, and why.

The attempt loop (``gateway.relay``) consumes only a ``RoutePlan``: an ordered list of
candidates. The router reads configuration and a stats snapshot; it knows nothing of HTTP.
"""

from gateway.native import activate

activate()  # before the first routing module is imported: the compiled ones, where built (``gateway.native``)

from gateway.routing.health import RouterState  # noqa: E402
from gateway.routing.inputs import inputs_of  # noqa: E402
from gateway.routing.overrides import ProviderPreferences, parse_preferences, split_model_suffix  # noqa: E402
from gateway.routing.plan import Candidate, RoutePlan, Router, RouteRequest  # noqa: E402

__all__ = [
    "Candidate",
    "ProviderPreferences",
    "RoutePlan",
    "RouteRequest",
    "Router",
    "RouterState",
    "inputs_of",
    "parse_preferences",
    "split_model_suffix",
]
