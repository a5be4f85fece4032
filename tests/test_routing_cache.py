"""The prompt cache a request may find: warm where the session is bound, cold (whole-prompt prefill) elsewhere.

What the router makes of those terms (the cached price, the prefill saved) is in ``test_routing_belief_session.py``
and ``test_routing_belief_prefill.py``."""

from __future__ import annotations

import dataclasses

from gateway.routing.affinity import cached_on
from gateway.routing.overrides import NO_PREFERENCES
from gateway.routing.plan import SessionRoute
from gateway.stats import StatsSnapshot
from tests.support.config import routing_config
from tests.support.samples import make_sample

CONFIG = routing_config([("a", 1.0, 2.0), ("b", 1.0, 2.0)])


def test_a_named_session_bound_nowhere_is_cold_everywhere_one_whose_binding_is_unknown_is_priced_by_hit_ratio() -> None:
    deployments = CONFIG.models[0].deployments
    # Each deployment reported half its prompts cached: what a request without a session is priced by.
    half = [
        dataclasses.replace(make_sample("m", d.name), usage_prompt_tokens=1000, usage_cached_tokens=500)
        for d in deployments
    ]
    snapshot = StatsSnapshot.from_samples(half)

    def cached(session: SessionRoute) -> dict[str, int]:
        return cached_on("m", session, deployments, NO_PREFERENCES, 40_000, snapshot)

    unbound = SessionRoute("k", "header", "auto", "unbound")
    assert cached(unbound) == {"a": 0, "b": 0}
    assert cached(SessionRoute("k", "header", "auto", "bound", "b", 30_000)) == {"a": 0, "b": 30_000}
    assert cached(SessionRoute("k", "header", "auto", "bound", "b", 50_000)) == {"a": 0, "b": 40_000}
    by_hit_ratio = cached(SessionRoute("k", "header", "auto", "unavailable"))
    assert 0 < by_hit_ratio["a"] == by_hit_ratio["b"] < 40_000
    assert cached(dataclasses.replace(unbound, affinity="off")) == by_hit_ratio
    # A long prompt seen for the first time may be a one-off request: routed as traffic without a session.
    assert cached(dataclasses.replace(unbound, source="fingerprint")) == by_hit_ratio
