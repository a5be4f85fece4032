"""Frozen, slotted dataclasses built without their frozen ``__init__``, for the few made on every request.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__`` (its own
``__setattr__`` refuses), and a call that names two dozen fields by keyword spends as long again matching
the names. ``positional_maker(cls)`` gives a function that takes every field's value in the field order and
returns an instance of ``cls`` itself: the values are stored by the ``__init__`` of a plain slotted twin of
``cls`` (the same slots in the same order, so the same memory layout), and the object's class is then set to
``cls``. What comes out is indistinguishable from ``cls(...)`` with the same values: its type, equality, hash,
``repr``, ``dataclasses.replace`` and pickling are ``cls``'s, and it is as frozen as any (setting a field
raises ``FrozenInstanceError``).

``gateway.quick_init`` makes a class's own ``__init__`` cheaper for every caller (each slot set through its
descriptor, keywords and defaults kept); this is for the one build site that runs per request, where a plain
``__init__`` with every value passed in order costs a third of that again.

It takes only what that twin can stand for: a frozen, slotted dataclass whose every field is set by its
``__init__`` and that has no ``__post_init__`` (nothing else would run). Every field is required by the maker
(no defaults), so a field added to ``cls`` must be passed by every caller: the callers' tests fail otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def positional_maker(cls: type[T]) -> Callable[..., T]:
    """A function of every field of ``cls`` in order, positionally, that returns what ``cls(*values)`` would.

    Raises ``TypeError`` when ``cls`` is not a frozen, slotted dataclass whose ``__init__`` only sets its fields.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__") or any(not field.init for field in dataclasses.fields(cls)):  # type: ignore[arg-type]
        raise TypeError(f"{cls.__name__}'s __init__ does more than set its fields")
    twin: Any = dataclasses.make_dataclass(
        f"_{cls.__name__}Draft",
        [(field.name, field.type) for field in dataclasses.fields(cls)],  # type: ignore[arg-type]
        slots=True,
        eq=False,
        repr=False,
        match_args=False,
    )
    if twin.__slots__ != cls.__slots__:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}'s slots are not its fields in order")

    def make(*values: Any) -> T:
        made = twin(*values)
        made.__class__ = cls  # the same slots, so the same layout: CPython allows the swap
        return made  # type: ignore[no-any-return]

    make.__doc__ = f"A {cls.__name__} of every field's value, in the order of its fields."
    return make


__all__ = ["positional_maker"]
