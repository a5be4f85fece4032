"""The belief's small classes with their ``__init__`` written out, and its sorts written out, held to what they replace.

``Run``, ``Scatter``, ``FailureRun`` and ``Prefill`` are made per answer (and ``Run`` per run of every plan's copy):
compiled, a written-out ``__init__`` is a native method where the one ``dataclasses`` generates stays interpreted.
Each must take the generated one's parameters, in order, with its defaults, and set every field. The runs', scatters'
and failure runs' ``heaviest_first`` (given each list's weights) stands in for ``sort(key=weight, reverse=True)``:
the same order, ties included.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import random
from typing import Any

import pytest

from gateway.routing import belief_runs
from gateway.routing.belief_failures import FailureRun
from gateway.routing.belief_noise import Scatter
from gateway.routing.belief_prefill import Prefill
from gateway.routing.belief_runs import Run

CLASSES: list[type[Any]] = [Run, Scatter, FailureRun, Prefill]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_written_init_takes_and_sets_what_the_generated_one_would(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    taken = [f for f in fields if f.init]
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except ValueError:  # compiled, a default mypyc cannot spell in a text signature: the calls below still hold it
        parameters = None
    if parameters is not None:
        assert [p.name for p in parameters] == [f.name for f in taken]
        assert [p.default for p in parameters] == [
            inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in taken
        ]
    values = [float(i) + 0.5 for i in range(len(taken))]
    made = cls(*values)
    assert [getattr(made, f.name) for f in taken] == values
    assert cls(**{f.name: v for f, v in zip(taken, values, strict=True)}) == made
    required = [v for f, v in zip(taken, values, strict=True) if f.default is dataclasses.MISSING]
    bare = cls(*required)  # every field with a default left to it (those not taken too)
    assert all(getattr(bare, f.name) == f.default for f in fields if f.default is not dataclasses.MISSING)


def _weights(rng: random.Random, n: int) -> list[float]:
    pool = [0.0, -0.0, 1.0, 0.5, 0.25, math.inf, 1e-300]
    return [rng.choice(pool) if rng.random() < 0.5 else rng.random() for _ in range(n)]


def _sort(items: list[Any]) -> None:
    belief_runs.heaviest_first(items, [item.weight for item in items])


@pytest.mark.parametrize(
    "make",
    [lambda w: Run(w, 0.0, 0.0, 1.0, 1.0), lambda w: Scatter(w), lambda w: FailureRun(w, 1.0, 1.0)],
    ids=["runs", "scatters", "failures"],
)
def test_heaviest_first_is_sort_by_weight_reversed(make: Any) -> None:
    sort = _sort
    rng = random.Random(7)
    for _ in range(2000):
        items = [make(w) for w in _weights(rng, rng.randint(0, 8))]
        expected = sorted(items, key=lambda item: item.weight, reverse=True)
        sort(items)
        assert [id(item) for item in items] == [id(item) for item in expected]
    with_nan = [make(w) for w in (0.5, math.nan, 1.0, 0.25)]
    expected = sorted(with_nan, key=lambda item: item.weight, reverse=True)
    sort(with_nan)
    assert [id(item) for item in with_nan] == [id(item) for item in expected]
