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
import struct
from statistics import NormalDist
from typing import Any

import pytest

from gateway.routing import belief_runs, student
from gateway.routing.belief import Belief
from gateway.routing.belief_failures import FailureRun
from gateway.routing.belief_prefill import Prefill
from gateway.routing.belief_runs import Run
from gateway.routing.belief_scatter import Scatter
from gateway.routing.student import TAIL_NU

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


def test_the_beliefs_written_init_takes_the_fields_in_order_and_leaves_out_what_the_factories_made() -> None:
    """``Belief`` (a copy per plan at load): every field a parameter, in order; each left out gets what its
    ``default_factory`` or default gives, fresh per belief; each given is kept as given (not copied)."""
    fields = dataclasses.fields(Belief)
    bare, other = Belief(), Belief()
    for f in fields:
        made = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert repr(getattr(bare, f.name)) == repr(made), f.name
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(bare, f.name) is not getattr(other, f.name), f.name  # one each, as a factory makes
    values: list[Any] = [object() for _ in fields]
    by_position = Belief(*values)
    by_name = Belief(**{f.name: v for f, v in zip(fields, values, strict=True)})
    for f, value in zip(fields, values, strict=True):
        assert getattr(by_position, f.name) is value and getattr(by_name, f.name) is value, f.name


def _reference_t_tail(x: float) -> float:
    xi = x / math.sqrt(TAIL_NU + x * x)
    rest, power, total = 1.0 - xi * xi, 1.0, 0.0
    for c in (1.0, 0.5):  # the finite sum's terms for ν = 4
        total += c * power
        power *= rest
    return 0.5 - 0.5 * xi * total


def _reference_censored_square(bound: float, mean: float, variance: float) -> float:
    alpha = (bound - mean) / math.sqrt(variance)
    tail = max(1e-12, 1.0 - NormalDist().cdf(alpha))
    return variance * (1.0 + alpha * NormalDist().pdf(alpha) / tail)


def _bits(x: float) -> bytes:
    return struct.pack("<d", x) if x == x else b"nan"


def test_a_bounds_tail_and_censored_square_written_out_are_the_former_floats() -> None:
    """``student._t_tail`` (ν = 4's two terms written out) and ``censored_square`` (``NormalDist()``'s cdf and pdf
    written out) against the former code, bit for bit, over wide values and the edges."""
    rng = random.Random(11)
    edges = [0.0, -0.0, 1e-300, -1e-300, 1e300, -1e300, math.inf, -math.inf, math.nan, 40.0, -40.0, 8.3, -8.3]
    for i in range(20000):
        x = rng.choice(edges) if i % 5 == 0 else rng.gauss(0.0, 10.0 if i % 2 else 1.0)
        assert _bits(student._t_tail(x)) == _bits(_reference_t_tail(x)), x
        bound = rng.choice(edges) if i % 7 == 0 else rng.gauss(0.0, 4.0)
        mean, variance = rng.gauss(0.0, 4.0), rng.expovariate(1.0) if i % 11 else rng.choice([1e-300, 1e6, 0.5])
        expected = _reference_censored_square(bound, mean, variance)
        assert _bits(student.censored_square(bound, mean, variance)) == _bits(expected), (bound, mean, variance)


def test_the_shapes_written_init_is_the_generated_ones() -> None:
    """``cost.Shape`` (one per plan) has its ``__init__`` written out: the same parameters in the fields' order, each
    field set to what was passed, a field left out given a fresh dict as its ``default_factory`` gives it."""
    from gateway.routing.cost import Shape

    assert [f.name for f in dataclasses.fields(Shape)] == ["prompt_tokens", "output_tokens", "cached", "valid"]
    cached, valid = {"a": 10}, {"a": 0.5}
    made = Shape(20, 256.0, cached, valid)
    assert (made.prompt_tokens, made.output_tokens) == (20, 256.0)
    assert made.cached is cached and made.valid is valid
    assert Shape(prompt_tokens=20, output_tokens=256.0, cached=cached, valid=valid) == made
    bare, other = Shape(20, 256.0), Shape(20, 256.0)
    assert bare.cached == {} and bare.valid == {} and bare.cached is not other.cached
    assert dataclasses.replace(made, output_tokens=30.0) == Shape(20, 30.0, cached, valid)
