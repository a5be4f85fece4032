"""TOML text from plain data: what ``gateway demo --write-config`` writes, so that the demo's config
can be read back by ``gateway bench -c``, ``gateway check -c`` or ``gateway stats -c``.

The standard library reads TOML (``tomllib``) but does not write it, and one small writer for the
shapes a config has (tables, arrays of tables, scalars, arrays of scalars) is simpler than a
dependency. ``tomllib.loads(dumps(data)) == data`` for every value it accepts; anything else
(``None``, dates, a mixed array of tables and scalars) is a ``TypeError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(data: Mapping[str, Any], *, header: str = "") -> str:
    """``data`` as a TOML document; ``header`` lines become comments at the top."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _table(data, [], lines)
    return "\n".join(lines).strip("\n") + "\n"


def _is_table_array(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and bool(value) and all(
        isinstance(item, Mapping) for item in value
    )  # fmt: skip


def _table(data: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    nested = []
    for key, value in data.items():
        if isinstance(value, Mapping) or _is_table_array(value):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        name = ".".join(_key(part) for part in [*path, key])
        if isinstance(value, Mapping):
            lines.extend(["", f"[{name}]"])
            _table(value, [*path, key], lines)
        else:
            for item in value:
                lines.extend(["", f"[[{name}]]"])
                _table(item, [*path, key], lines)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # A JSON string is a TOML basic string when written unescaped (ensure_ascii would write surrogate
    # pairs, which TOML refuses), but for DEL: TOML wants it escaped, and JSON leaves it raw.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Sequence) and not any(isinstance(item, Mapping) for item in value):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML: {value!r}")
