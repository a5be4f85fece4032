"""Reading a simulated market (``benchmarks.routing_scenarios.Scenario``) in the held-out sets' tests: who the time
oracle favours when, and what happens to one provider."""

from __future__ import annotations

from benchmarks.routing_scenarios import Change, Profile, Scenario, oracle_choice


def leads(market: Scenario, tokens: int) -> list[tuple[float, str]]:
    """The time oracle's best for answers of ``tokens`` at every half second, as runs of (from when, who)."""
    runs: list[tuple[float, str]] = []
    for tick in range(int(market.duration_s * 2)):
        best = oracle_choice(tokens, list(market.profiles_at(tick / 2).values()))
        if not runs or runs[-1][1] != best:
            runs.append((tick / 2, best))
    return runs


def moves(market: Scenario, name: str) -> list[Change]:
    """``name``'s changes, in order."""
    return [c for c in market.changes if c.name == name]


def start(market: Scenario, name: str) -> Profile:
    """``name``'s profile at the market's start."""
    return next(p for p in market.providers if p.name == name)
