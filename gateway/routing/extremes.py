"""The largest and smallest of a list of floats, as ``max`` and ``min`` find them, in one pass.

The fast view's change tests (``gateway.routing.estimates``) ask, for each metric of every answer, whether any of
its windows' shifts is far enough to be looked at. ``max(shifts)`` and ``min(shifts)`` are two calls of the
builtins, each comparing Python floats; compiled (``gateway.native``) this loop compares native doubles. It keeps the
builtins' exact rule, a NaN included: the first item is the start, and a later item replaces it only when it
compares greater (smaller), so a NaN first is kept and a NaN later is passed over.
"""

from __future__ import annotations


def extremes(values: list[float]) -> tuple[float, float]:
    """(``max(values)``, ``min(values)``) for a non-empty list."""
    high = low = values[0]
    for value in values:
        if value > high:
            high = value
        if value < low:
            low = value
    return high, low


def within(values: list[float], bound: float) -> bool:
    """``max(values) < bound and min(values) > -bound`` for a non-empty list."""
    high, low = extremes(values)
    return high < bound and low > -bound


def reach(values: list[float]) -> float:
    """``max(max(values), -min(values))`` for a non-empty list: how far from zero its farthest value reads."""
    high, low = extremes(values)
    return -low if -low > high else high  # ``max``'s rule with two arguments: the second only if greater
