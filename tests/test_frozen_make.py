"""The C makers of the per-request frozen objects (``frozen_make.c``) against the pure ones (``gateway.frozen``).

``positional_maker`` returns a C callable where the build holds ``gateway._frozen_make`` and the twin maker
elsewhere; every class the gateway makes per request is held here to both, over values that differ in every field:
the same type, fields, equality, hash, ``repr``, pickling, ``dataclasses.replace``, frozenness, collector tracking and
reference counts (no value leaked or lost). The C module comes from the build (``python -m gateway.native_build``),
whatever ``GATEWAY_NATIVE`` says; without a fresh build these tests are skipped (the pure gateway never loads it), and
``tests/test_routing_makers.py`` and ``tests/test_positional_builds.py`` run against the C makers in
``tests/test_native.py``'s compiled suite.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
import random
import re
import sys
from typing import Any

import pytest

from gateway import native
from gateway.admission.access import LateBooking
from gateway.admission.ratelimit import RateDecision
from gateway.admission.spending.store import Booking
from gateway.frozen import positional_maker, twin_maker
from gateway.relay.request import ProxyRequest
from gateway.routing.plan import Candidate, RoutePlan, RouteRequest
from gateway.routing.ranking import Ranked
from gateway.samples import Sample
from tests.support.native_c import load_built_c

NAME = "gateway._frozen_make"


MODULE = load_built_c(NAME)
needs_build = pytest.mark.skipif(MODULE is None, reason="no fresh build of the C makers (gateway.native_build)")

CLASSES: list[type[Any]] = [
    Sample,
    RateDecision,
    Booking,
    ProxyRequest,
    RouteRequest,
    Candidate,
    RoutePlan,
    LateBooking,
]
"""Every class a ``positional_maker`` is made of in the gateway."""


def _makers(cls: type[Any]) -> tuple[Any, Any]:
    """(the C maker, the twin maker) of ``cls``."""
    assert MODULE is not None
    names = [field.name for field in dataclasses.fields(cls)]
    twin = dataclasses.make_dataclass(f"_{cls.__name__}Draft", names, slots=True, eq=False, repr=False)
    return MODULE.maker(cls, tuple(cls.__dict__[name] for name in names)), twin_maker(cls, twin)


def _value(rng: random.Random) -> Any:
    """A distinct value of one of several kinds: floats, ints, strings, tuples, None."""
    kind = rng.randrange(5)
    if kind == 0:
        return rng.uniform(-1e6, 1e6)
    if kind == 1:
        return rng.getrandbits(40)
    if kind == 2:
        return f"s{rng.getrandbits(40)}"
    if kind == 3:
        return (rng.random(), f"t{rng.getrandbits(20)}")
    return None


def test_every_maker_class_is_listed() -> None:
    """Each class the gateway's sources give a positional maker is among ``CLASSES`` (else not held to its twin)."""
    made = set()
    for path in native.PACKAGE.rglob("*.py"):
        made.update(re.findall(r"= positional_maker\((\w+)\)", path.read_text()))
    assert made == {cls.__name__ for cls in CLASSES}


@needs_build
@pytest.mark.parametrize("cls", CLASSES, ids=[cls.__name__ for cls in CLASSES])
def test_the_c_maker_makes_what_the_twin_maker_makes(cls: type[Any]) -> None:
    made_c, made_twin = _makers(cls)
    rng = random.Random(cls.__name__)
    names = [field.name for field in dataclasses.fields(cls)]
    for _ in range(300):
        values = [_value(rng) for _ in names]
        fresh = [value for value in values if value is not None]  # None's count moves with anything
        counts = [sys.getrefcount(value) for value in fresh]
        one, other = made_c(*values), made_twin(*values)
        assert type(one) is cls and type(other) is cls
        assert [getattr(one, name) for name in names] == values
        assert all(getattr(one, name) is value for name, value in zip(names, values, strict=True))
        assert one == other and hash(one) == hash(other) and repr(one) == repr(other)
        assert pickle.loads(pickle.dumps(one)) == other and copy.copy(one) == other
        assert dataclasses.replace(one, **{names[0]: "x"}) == dataclasses.replace(other, **{names[0]: "x"})
        assert gc.is_tracked(one) == gc.is_tracked(other)
        assert gc.get_referents(one) == gc.get_referents(other)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(one, names[-1], 0)
        assert not hasattr(one, "__dict__")
        del one, other
        assert [sys.getrefcount(value) for value in fresh] == counts  # each value held once per object, then freed


@needs_build
def test_the_c_maker_refuses_another_count_and_keywords() -> None:
    made_c, _ = _makers(Candidate)
    fields = len(dataclasses.fields(Candidate))
    for given in (0, fields - 1, fields + 1):
        with pytest.raises(TypeError):
            made_c(*range(given))
    with pytest.raises(TypeError):
        made_c(*range(fields - 1), length=None)


@needs_build
def test_the_c_maker_takes_only_the_class_own_object_slots() -> None:
    assert MODULE is not None
    names = [field.name for field in dataclasses.fields(Candidate)]
    members = tuple(Candidate.__dict__[name] for name in names)
    with pytest.raises(TypeError):
        MODULE.maker(Candidate, (*members[:-1], Ranked.__dict__["model"]))  # a slot of another class
    with pytest.raises(TypeError):
        MODULE.maker(Candidate, (*members[:-1], Candidate.__dict__["name"]))  # a property
    with pytest.raises(TypeError):
        MODULE.maker(Candidate, list(members))  # members as a tuple
    with pytest.raises(TypeError):
        MODULE.maker(int, ())  # not a heap class


@needs_build
def test_the_build_compiles_the_makers_and_the_gateway_uses_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "frozen_make.c" in native.source_hashes()
    monkeypatch.setenv("GATEWAY_NATIVE", "1")
    monkeypatch.delitem(sys.modules, NAME, raising=False)
    loaded = native.load_c(NAME)
    assert loaded is not None
    monkeypatch.setattr("gateway.frozen.MAKERS", loaded)
    assert type(positional_maker(Booking)).__name__ == "Maker"


def test_the_pure_gateway_makes_with_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_NATIVE", "0")
    assert native.load_c(NAME) is None
    monkeypatch.setattr("gateway.frozen.MAKERS", None)
    made = positional_maker(Booking)
    assert type(made).__name__ == "function"
    assert made("k", "t", "m", "p", "d", 3) == Booking("k", "t", "m", "p", "d", 3)
