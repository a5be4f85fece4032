"""The measured router's per-plan objects, built by their positional makers, are what their classes build.

``gateway.frozen.positional_maker`` stands in for ``cls(*values)`` at the router's build sites (a prediction, its
uncertainties, a score, a ranked row, a ranking, a candidate, a plan, an estimate, an observation): each maker is held
here to its class over values that differ in every field, so a maker of another class, or a field out of place,
fails. ``benchmarks/plan_hash.py`` holds the build sites themselves to the former plans, float for float.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest

from gateway.routing.estimates import (
    Estimate,
    Observation,
    _Attempt,
    _Sums,
    estimate_from_fields,
    observation_from_fields,
)
from gateway.routing.plan import Candidate, RoutePlan, candidate_from_fields, route_plan_from_fields
from gateway.routing.predict import _Value
from gateway.routing.ranking import Ranked, Ranking, ranked_from_fields, ranking_from_fields
from gateway.routing.scored import (
    Prediction,
    RequestShape,
    Scored,
    ScoreParts,
    Uncertainty,
    prediction_from_fields,
    request_shape_from_fields,
    score_parts_from_fields,
    scored_from_fields,
    uncertainty_from_fields,
)

MAKERS: list[tuple[type[Any], Callable[..., Any]]] = [
    (Prediction, prediction_from_fields),
    (Uncertainty, uncertainty_from_fields),
    (RequestShape, request_shape_from_fields),
    (ScoreParts, score_parts_from_fields),
    (Scored, scored_from_fields),
    (Ranked, ranked_from_fields),
    (Ranking, ranking_from_fields),
    (Candidate, candidate_from_fields),
    (RoutePlan, route_plan_from_fields),
    (Estimate, estimate_from_fields),
    (Observation, observation_from_fields),
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


@pytest.mark.parametrize("cls", [_Value, _Attempt, _Sums], ids=["_Value", "_Attempt", "_Sums"])
def test_a_written_out_init_is_the_one_its_dataclass_generates(cls: type[Any]) -> None:
    """``predict._Value``, ``estimates._Attempt`` and ``estimates._Sums`` write their ``__init__`` out (compiled, it
    stores each field directly; the generated one is interpreted): the same parameters and defaults, every field
    stored in its place."""
    fields = dataclasses.fields(cls)
    twin: Any = dataclasses.make_dataclass(
        f"_{cls.__name__}Generated",
        [(f.name, f.type, dataclasses.field(default=f.default)) for f in fields],
        slots=True,
    )
    assert inspect.signature(cls.__init__) == inspect.signature(twin.__init__).replace(
        return_annotation=inspect.signature(cls.__init__).return_annotation
    )
    rng = random.Random(cls.__name__)
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    for given in range(len(required), len(fields) + 1):
        values = [rng.uniform(-1e6, 1e6) for _ in range(given)]
        made, generated = cls(*values), twin(*values)
        assert [getattr(made, f.name) for f in fields] == [getattr(generated, f.name) for f in fields]
