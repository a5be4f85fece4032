"""The prompt cache a request may find: warm where the session is bound, cold (whole-prompt prefill) elsewhere.

What the router makes of those terms (the cached price, the prefill saved) is in ``test_routing_belief_session.py``
and ``test_routing_belief_prefill.py``."""

from __future__ import annotations

import dataclasses

from gateway.routing.affinity import CacheTerms, cache_terms
from gateway.routing.overrides import NO_PREFERENCES
from gateway.routing.plan import SessionRoute
from tests.support.config import routing_config

CONFIG = routing_config([("a", 1.0, 2.0), ("b", 1.0, 2.0)])


def test_a_named_session_bound_nowhere_is_cold_everywhere_one_whose_binding_is_unknown_is_priced_by_hit_ratio() -> None:
    deployments = CONFIG.models[0].deployments
    unbound = SessionRoute("k", "header", "auto", "unbound")
    assert cache_terms(unbound, deployments, NO_PREFERENCES) == {d.name: CacheTerms("cold") for d in deployments}
    bound = SessionRoute("k", "header", "auto", "bound", "b", 30_000)
    assert cache_terms(bound, deployments, NO_PREFERENCES) == {"a": CacheTerms("cold"), "b": CacheTerms("warm", 30_000)}
    unknown = SessionRoute("k", "header", "auto", "unavailable")
    assert cache_terms(unknown, deployments, NO_PREFERENCES) is None
    assert cache_terms(dataclasses.replace(unbound, affinity="off"), deployments, NO_PREFERENCES) is None
    # A long prompt seen for the first time may be a one-off request: routed as traffic without a session.
    assert cache_terms(dataclasses.replace(unbound, source="fingerprint"), deployments, NO_PREFERENCES) is None
