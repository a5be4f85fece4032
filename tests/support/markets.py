"""Reading a simulated market (``benchmarks.routing_scenarios.Scenario``) in the held-out sets' tests: who the time
oracle favours when, and what happens to one provider."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

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


def profiles(sets: Iterable[Scenario]) -> set[Profile]:
    """Every profile the markets of ``sets`` start with or change to."""
    return {p for s in sets for p in (*s.providers, *(c.profile for c in s.changes))}


def check_fresh(market: Scenario, earlier_profiles: set[Profile]) -> None:
    """A held-out market builds, with unique providers, changes in order, realistic profiles none of which an earlier
    set used, and a first party priced several times the others."""
    names = [p.name for p in market.providers]
    assert len(set(names)) == len(names) and {c.name for c in market.changes} <= set(names), market.name
    assert market.schedule(1) and 105 <= market.duration_s <= 230 and 1.4 <= market.rate_per_s <= 4.3
    times = [c.at_s for c in market.changes]
    assert times == sorted(times) and 0 < times[0] and times[-1] < market.duration_s, market.name
    for p in (*market.providers, *(c.profile for c in market.changes)):
        assert 0.15 <= p.ttft_s <= 3.0 and 20 <= p.tps <= 400 and 0 <= p.error_rate <= 1, (market.name, p)
        assert p.price > 0 and p not in earlier_profiles, (market.name, p)  # fresh parameters throughout
    prices = sorted(p.price for p in market.providers)  # a first party's, several times the others'
    assert prices[-1] >= 4 * statistics.median(prices[:-1]), market.name
