"""Frozen, slotted dataclasses built without their frozen ``__init__``, for the objects made on every request.

A frozen dataclass refuses ``self.x = ...``, so its generated ``__init__`` sets each field by
``object.__setattr__(self, "x", x)``: a global look-up, an attribute look-up and a generic attribute set (which
finds the slot's descriptor by name) per field, and a call that names two dozen fields by keyword spends as long
again matching the names. Two remedies, each making the very instance ``cls(...)`` would (same type, values,
equality, hash, ``repr``, ``dataclasses.replace`` and pickling; still frozen):

- ``quick_init`` (a class decorator) gives the class an ``__init__`` of the same parameters and defaults that calls
  each slot's descriptor itself (``member.__set__``, where ``object.__setattr__`` ends up): cheaper for every caller.
  The router builds such objects per deployment on every plan (a ``Candidate``, and a ``Ranked`` with its
  ``Prediction`` per deployment where a ranking is explained), and field by field those sets were once a sixth
  of a plan's time. Only for what the generated ``__init__`` does
  alone: a field with a ``default_factory``, ``init=False`` or ``kw_only``, an ``InitVar`` or a ``__post_init__``
  is refused (``TypeError``), as is a class that is not a frozen dataclass with ``__slots__``.
- ``positional_maker(cls)`` gives a function that takes every field's value in the field order and returns an
  instance of ``cls``: the values are stored by the ``__init__`` of a plain slotted twin of ``cls`` (the same slots
  in the same order, so the same memory layout), and the object's class is then set to ``cls``. For the one build
  site that runs per request, where a plain ``__init__`` with every value passed in order costs a third of
  ``quick_init``'s again. It takes only a frozen, slotted dataclass whose every field is set by its ``__init__``
  and that has no ``__post_init__``; every field is required by the maker (no defaults), so a field added to
  ``cls`` must be passed by every caller: the callers' tests fail otherwise. Where the build holds ``frozen_make.c``
  (``gateway.native.C_MODULES``), the maker is a C callable instead: it allocates the object as ``object.__new__``
  does and stores each value at its slot's offset (no Python frame, no twin, no class swap), and the object is the
  same (``tests/test_routing_makers.py`` and ``tests/test_positional_builds.py`` hold both makers to the class).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any, TypeVar

from gateway import native

T = TypeVar("T")

MAKERS = native.load_c("gateway._frozen_make")
"""The C makers (``frozen_make.c``) when the build is used (``gateway.native.load_c``), else None: the twins'."""

GENERATED: dict[type, Any] = {}
"""Each class given a quick ``__init__``, with the ``__init__`` its dataclass generated (for the tests)."""


def quick_init(cls: type[T]) -> type[T]:
    """Replace ``cls``'s dataclass ``__init__`` by one that sets each slot through its descriptor (see the module)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    generated = cls.__dict__["__init__"]
    names = [f.name for f in fields]
    if [p for p in inspect.signature(generated).parameters][1:] != names:
        raise TypeError(f"{cls.__name__}'s __init__ takes more than its fields (an InitVar?)")
    namespace: dict[str, Any] = {}
    parameters = []
    for index, field in enumerate(fields):
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{field.name}: a default_factory, init=False or kw_only field")
        if field.name == "self" or field.name.startswith("_quick_"):
            raise TypeError(f"{cls.__name__}.{field.name}: a name the quick __init__ uses")
        member = cls.__dict__[field.name]
        if not isinstance(member, types.MemberDescriptorType):
            raise TypeError(f"{cls.__name__}.{field.name} is not a slot")
        namespace[f"_quick_set_{index}"] = member.__set__
        if field.default is dataclasses.MISSING:
            parameters.append(field.name)
        else:
            namespace[f"_quick_default_{index}"] = field.default
            parameters.append(f"{field.name}=_quick_default_{index}")
    # The setters and defaults are the closure's (a cell is read faster than a global).
    body = "".join(f"        _quick_set_{i}(self, {name})\n" for i, name in enumerate(names)) or "        pass\n"
    source = f"def _quick_make({', '.join(namespace)}):\n    def __init__(self, {', '.join(parameters)}):\n{body}"
    built: dict[str, Any] = {}
    exec(f"{source}    return __init__\n", built)
    init = built["_quick_make"](**namespace)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(getattr(generated, "__annotations__", {}))
    GENERATED[cls] = generated
    type.__setattr__(cls, "__init__", init)
    return cls


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
    if MAKERS is not None:
        members = tuple(cls.__dict__[name] for name in twin.__slots__)
        return MAKERS.maker(cls, members)  # type: ignore[no-any-return]
    return twin_maker(cls, twin)


def twin_maker(cls: type[T], twin: Any) -> Callable[..., T]:
    """The pure maker: ``twin``'s ``__init__`` stores the values, then the object becomes a ``cls``."""

    def make(*values: Any) -> T:
        made = twin(*values)
        made.__class__ = cls  # the same slots, so the same layout: CPython allows the swap
        return made  # type: ignore[no-any-return]

    make.__doc__ = f"A {cls.__name__} of every field's value, in the order of its fields."
    return make


__all__ = ["GENERATED", "MAKERS", "positional_maker", "quick_init", "twin_maker"]
