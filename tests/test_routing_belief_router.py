"""The belief router (``gateway.routing.belief_router``) in simulated time: where its looks go, and how soon.

Runs the real router over ``benchmarks.routing_simulate`` (no processes): a market where the slowest of three
recovers while requests come once a second, the case where looks budgeted as a share of requests came tens of
seconds late.
"""

from __future__ import annotations

from benchmarks.routing_scenarios import STRESS
from benchmarks.routing_simulate import Simulation
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate


def _served_after(seed: int, name: str, at_s: float) -> tuple[float, float]:
    """When the recovered provider is first looked at after ``at_s``, and when it first answers as the leader."""
    scenario = next(s for s in STRESS if s.name == "recovery-1rps")
    sim = Simulation(scenario, seed, "gateway", None, "new")
    router = sim.router
    assert isinstance(router, BeliefRouter)
    started: list[tuple[float, str]] = []
    attempt_started = router.attempt_started

    def record(candidate: Candidate, *, retry: bool = False) -> bool:
        ok = attempt_started(candidate, retry=retry)
        if ok and candidate.name == name and sim.now >= at_s:
            started.append((sim.now - at_s, candidate.reason))
        return ok

    router.attempt_started = record  # type: ignore[method-assign]
    sim.run()
    look = min(t for t, _ in started)
    led = min(t for t, reason in started if reason == "best-score")
    return look, led


def test_a_recovery_at_one_request_a_second_is_found_in_the_time_its_belief_sets() -> None:
    """novita, unheard since the cold start, recovers 50 s in: its belief's chance of a change has grown with the
    time it went unheard, so a look goes there within seconds, not when a share of requests comes round."""
    change = next(s for s in STRESS if s.name == "recovery-1rps").changes[0]
    for seed in range(1, 5):
        look, led = _served_after(seed, change.name, change.at_s)
        assert look < 20.0, (seed, look)
        assert led < 25.0, (seed, led)
