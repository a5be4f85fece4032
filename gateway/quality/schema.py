"""A small JSON Schema checker: the subset that tool parameters and response schemas use.

Tool ``parameters`` (OpenAI), ``input_schema`` (Anthropic) and ``json_schema`` response formats
are JSON Schema, but what decides whether a client can use an answer is a handful of keywords:
``type`` (one or a list), ``properties``, ``required``, ``items``, ``enum`` and ``const``, nested.
This checks those and ignores every other keyword (``$ref``, ``anyOf``, ``pattern``, formats ...):
an answer is never called invalid for a rule the checker does not read. No dependency: a full
validator costs more to import and to run than the one answer it judges is worth.

Usage::

    schema_problem({"city": 3}, {"type": "object", "required": ["city"],
                                 "properties": {"city": {"type": "string"}}})
    # -> "$.city: expected string, got integer"
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 32
"""Nesting below which a schema is no longer followed (a recursive or hostile schema cannot loop)."""

_NAMES: dict[type, str] = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def type_name(value: object) -> str:
    """The JSON Schema type of a decoded JSON value (``integer`` for whole numbers, as the spec counts 1.0)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    return _NAMES.get(type(value), "unknown")


def _fits(value: object, expected: str) -> bool:
    actual = type_name(value)
    return actual == expected or (expected == "number" and actual == "integer")


def schema_problem(value: Any, schema: object, path: str = "$", depth: int = 0) -> str | None:
    """The first place where ``value`` breaks ``schema`` (a path and what was expected), or None if it fits."""
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None  # ``true``, ``{}``, or too deep: anything fits
    expected = schema.get("type")
    if isinstance(expected, str) and not _fits(value, expected):
        return f"{path}: expected {expected}, got {type_name(value)}"
    if isinstance(expected, list) and expected and not any(isinstance(t, str) and _fits(value, t) for t in expected):
        return f"{path}: expected {' or '.join(str(t) for t in expected)}, got {type_name(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, option) for option in enum):
        return f"{path}: {_short(value)} is not one of the enum's {len(enum)} values"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{path}: expected the constant {_short(schema['const'])}"
    if isinstance(value, dict):
        required = schema.get("required")
        if isinstance(required, list):
            for key in required:
                if isinstance(key, str) and key not in value:
                    return f"{path}: missing required key {key!r}"
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                if key in value:
                    problem = schema_problem(value[key], sub, f"{path}.{key}", depth + 1)
                    if problem is not None:
                        return problem
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                problem = schema_problem(item, items, f"{path}[{index}]", depth + 1)
                if problem is not None:
                    return problem
    return None


def _same(value: object, option: object) -> bool:
    """JSON equality: ``True`` is not ``1`` (Python's ``==`` says it is)."""
    if isinstance(value, bool) or isinstance(option, bool):
        return type(value) is type(option) and value == option
    return value == option


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
