"""Hypothesis strategies for realistic JSON with odd values inside: a template with values replaced at random paths.

A fuzz of bodies drawn from nothing mostly tests the first check that refuses them; a realistic body with one to
three values replaced by the wrong kind (a number for a list, an object for a string) reaches the code behind it.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=8)
)
odd_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (object keys and list indexes), parents before their children."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((*prefix, key))
        found.extend(paths_in(child, (*prefix, key)))
    return found


@st.composite
def mutated(draw: st.DrawFn, template: Any) -> Any:
    """``template`` with one to three of its values replaced by odd ones."""
    value = copy.deepcopy(template)
    for path in draw(st.lists(st.sampled_from(paths_in(value)), min_size=1, max_size=3)):
        holder = value
        try:
            for key in path[:-1]:
                holder = holder[key]
            holder[path[-1]] = draw(odd_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement took this path away
    return value
