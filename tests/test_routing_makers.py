"""The router's per-plan objects, built by their positional makers, are what their classes build.

``gateway.frozen.positional_maker`` stands in for ``cls(*values)`` at the router's build sites (a candidate, a plan):
each maker is held here to its class over values that differ in every field, so a maker of another class, or a field
out of place, fails. ``benchmarks/plan_hash.py`` holds the build sites themselves to the former plans, float for
float.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest

from gateway.routing.plan import Candidate, RoutePlan, candidate_from_fields, route_plan_from_fields

MAKERS: list[tuple[type[Any], Callable[..., Any]]] = [
    (Candidate, candidate_from_fields),
    (RoutePlan, route_plan_from_fields),
]


@pytest.mark.parametrize(("cls", "make"), MAKERS, ids=[cls.__name__ for cls, _ in MAKERS])
def test_each_maker_makes_what_its_class_makes(cls: type[Any], make: Callable[..., Any]) -> None:
    rng = random.Random(cls.__name__)
    names = [field.name for field in dataclasses.fields(cls)]
    for _ in range(200):
        values = {name: rng.uniform(-1e6, 1e6) for name in names}  # distinct in every field (hashable, comparable)
        made, built = make(*values.values()), cls(**values)
        assert type(made) is cls
        assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
        assert [getattr(made, name) for name in names] == list(values.values())
        assert pickle.loads(pickle.dumps(made)) == built and copy.copy(made) == built
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, names[0], 0.0)
    with pytest.raises(TypeError):
        make(*values.values(), 1.0)  # one too many
    with pytest.raises(TypeError):
        make(*list(values.values())[:-1])  # every field is required
