"""``quick_init``: the instance the dataclass's own ``__init__`` makes, still frozen, for each class given one."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

import gateway.routing.belief_live  # noqa: F401  (imports every class the plan and its ranking build)
from gateway.frozen import GENERATED, quick_init
from gateway.routing.plan import Candidate
from gateway.routing.ranking import Prediction


def _both(cls: type, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    quick = cls(*args, **kwargs)
    generated: Any = object.__new__(cls)
    GENERATED[cls](generated, *args, **kwargs)
    return quick, generated


def _slots(instance: Any) -> list[tuple[str, Any]]:
    return [(f.name, getattr(instance, f.name)) for f in dataclasses.fields(instance)]


def test_the_plans_classes_have_one() -> None:
    names = {cls.__name__ for cls in GENERATED}
    assert {"Prediction", "Uncertainty", "Scored", "ScoreParts", "Ranked", "Ranking", "Candidate", "RoutePlan"} <= names


@pytest.mark.parametrize("cls", list(GENERATED), ids=lambda cls: cls.__name__)
def test_every_field_is_set_as_the_generated_init_sets_it(cls: type) -> None:
    fields = dataclasses.fields(cls)
    values = [object() for _ in fields]
    quick, generated = _both(cls, *values)
    assert all(got is value for (_, got), value in zip(_slots(quick), values, strict=True))
    assert _slots(quick) == _slots(generated)
    by_name = {f.name: v for f, v in zip(fields, values, strict=True)}
    assert _slots(cls(**by_name)) == _slots(quick)
    # Defaults: only the required fields given.
    required = {f.name: by_name[f.name] for f in fields if f.default is dataclasses.MISSING}
    quick, generated = _both(cls, **required)
    assert [(n, v) for n, v in _slots(quick)] == [(n, v) for n, v in _slots(generated)]
    assert all(got is getattr(generated, name) for name, got in _slots(quick))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(quick, fields[0].name, None)
    assert list(inspect.signature(cls).parameters) == [f.name for f in fields]


def test_equal_and_hashed_as_before() -> None:
    quick, generated = _both(Prediction, 0.1, 50.0, 2.0, 0.001, 1.0, 3, False, expected_s=2.0)
    assert quick == generated and hash(quick) == hash(generated)
    assert dataclasses.replace(quick, ttft_s=0.2) == dataclasses.replace(generated, ttft_s=0.2)


def test_a_missing_argument_still_fails() -> None:
    with pytest.raises(TypeError):
        Candidate()  # type: ignore[call-arg]


def test_refused_where_the_generated_init_does_more() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        items: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Post:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Late:
        a: int
        b: int = dataclasses.field(default=0, init=False)

    for cls in (Factory, Post, NoSlots, NotFrozen, Late):
        with pytest.raises(TypeError):
            quick_init(cls)
