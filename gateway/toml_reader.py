"""A typed reader of TOML tables that knows its key path and rejects keys nobody read.

Shared by every TOML file the gateway reads (the config, its policies, the keys file), so that all
of them give the same precise errors::

    config.toml: models[2].deployments[0].provider: unknown provider "grok" (known: groq, together)

Each getter consumes a key and returns a value of its declared type (``str``, ``int``, ``float``,
``bool``, or ``... | None`` when the default is ``None``); a missing key without a default, or a
value of the wrong type, raises ``ConfigError``. ``finish`` then refuses any key left unread: a
typo must never be silently ignored. Usage::

    table = TableReader(data, "server", "config.toml")
    port = table.integer("port", 8080, minimum=0)
    host = table.text("host", "127.0.0.1")
    table.finish()
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar, overload

_T = TypeVar("_T")
_INT64 = 2**63 - 1
"""TOML's integers are 64-bit; tomllib reads longer ones, which the config refuses as the spec does."""


def _short(value: float) -> str:
    """A number for an error message: a 400-digit integer is not written out."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}… ({len(text)} digits)"


class ConfigError(ValueError):
    """An invalid config. The message is complete and safe to print: it never holds a secret."""


class _Missing:
    """The default of a key that must be present."""


MISSING = _Missing()


class TableReader:
    """A TOML table being read: every getter consumes a key; ``finish`` rejects what is left."""

    def __init__(self, data: Mapping[str, Any], path: str, source: str, *, secret: bool = False) -> None:
        self.data = data
        self.path = path
        self.source = source
        self.secret = secret
        """A file that holds secrets (the keys file): errors name a wrong value's kind, never the value."""
        self.seen: set[str] = set()

    def error(self, key: str | None, message: str) -> ConfigError:
        """A ``ConfigError`` that names the file and ``key``'s path."""
        where = self.path if key is None else (f"{self.path}.{key}" if self.path else key)
        return ConfigError(f"{self.source}: {where}: {message}")

    def has(self, key: str) -> bool:
        return key in self.data

    def names(self) -> list[str]:
        """The keys of this table, in file order (for tables whose keys are names, like ``[policies]``)."""
        return list(self.data)

    def raw(self, key: str) -> object:
        """Consume ``key`` and return its value as TOML gave it (``MISSING`` when absent), to check by hand."""
        self.seen.add(key)
        return self.data.get(key, MISSING)

    @overload
    def text(self, key: str, *, nonempty: bool = True) -> str: ...
    @overload
    def text(self, key: str, default: str, *, nonempty: bool = True) -> str: ...
    @overload
    def text(self, key: str, default: None, *, nonempty: bool = True) -> str | None: ...
    def text(self, key: str, default: str | None | _Missing = MISSING, *, nonempty: bool = True) -> str | None:
        value = self._take(key, (str,), "a string", default)
        if value is None:
            return None
        assert isinstance(value, str)
        if nonempty and not value.strip():
            raise self.error(key, "expected a non-empty string")
        return value

    @overload
    def integer(self, key: str, *, minimum: int | None = None) -> int: ...
    @overload
    def integer(self, key: str, default: int, *, minimum: int | None = None) -> int: ...
    @overload
    def integer(self, key: str, default: None, *, minimum: int | None = None) -> int | None: ...
    def integer(self, key: str, default: int | None | _Missing = MISSING, *, minimum: int | None = None) -> int | None:
        value = self._take(key, (int,), "an integer", default)
        if value is None:
            return None
        assert isinstance(value, int)
        if abs(value) > _INT64:
            raise self.error(key, f"expected a 64-bit integer (as TOML defines them), got {_short(value)}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"expected an integer >= {minimum}, got {value}")
        return value

    @overload
    def number(self, key: str, *, minimum: float | None = None, positive: bool = False) -> float: ...
    @overload
    def number(self, key: str, default: float, *, minimum: float | None = None, positive: bool = False) -> float: ...
    @overload
    def number(
        self, key: str, default: None, *, minimum: float | None = None, positive: bool = False
    ) -> float | None: ...
    def number(
        self,
        key: str,
        default: float | None | _Missing = MISSING,
        *,
        minimum: float | None = None,
        positive: bool = False,
    ) -> float | None:
        value = self._take(key, (int, float), "a number", default)
        if value is None:
            return None
        assert isinstance(value, int | float)
        if isinstance(value, float) and not math.isfinite(value) or isinstance(value, int) and abs(value) > _INT64:
            # TOML has nan and inf, and tomllib integers of any size: none is a price, a timeout or a limit (and
            # float() of a 400-digit integer raises OverflowError, which a reload could not say in words).
            raise self.error(key, f"expected a finite number, got {_short(value)}")
        if positive and value <= 0:
            raise self.error(key, f"expected a number > 0, got {value}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"expected a number >= {minimum}, got {value}")
        return float(value)

    def flag(self, key: str, default: bool | _Missing = MISSING) -> bool:
        value = self._take(key, (bool,), "true or false", default)
        assert isinstance(value, bool)
        return value

    def choice(self, key: str, choices: tuple[_T, ...], default: _T | _Missing = MISSING) -> _T:
        """One of ``choices`` (strings, typically the values of a ``Literal``)."""
        expected = "one of " + ", ".join(f'"{c}"' for c in choices)
        value = self._take(key, (str,), expected, default)
        for option in choices:
            if option == value:
                return option
        raise self.error(key, f'expected one of {", ".join(map(repr, choices))}, got "{value}"')

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """An array of non-empty strings."""
        value = self._take(key, (list,), "an array of strings", list(default))
        assert isinstance(value, list)
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.error(f"{key}[{index}]", f"expected a non-empty string, got {self._got(item)}")
        return tuple(value)

    def table(self, key: str) -> TableReader:
        value = self._take(key, (dict,), "a table", {})
        assert isinstance(value, dict)
        return TableReader(value, f"{self.path}.{key}" if self.path else key, self.source, secret=self.secret)

    def tables(self, key: str, *, required: bool = False) -> list[TableReader]:
        value = self._take(key, (list,), "an array of tables", MISSING if required else [])
        assert isinstance(value, list)
        tables = []
        for index, item in enumerate(value):
            path = f"{self.path}.{key}[{index}]" if self.path else f"{key}[{index}]"
            if not isinstance(item, dict):
                raise ConfigError(f"{self.source}: {path}: expected a table, got {self._got(item)}")
            tables.append(TableReader(item, path, self.source, secret=self.secret))
        return tables

    def str_table(self, key: str) -> tuple[tuple[str, str], ...]:
        """A table of string values, as (name, value) pairs in file order."""
        sub = self.table(key)
        pairs = [(name, sub.text(name)) for name in sub.names()]
        sub.finish()
        return tuple(pairs)

    def finish(self) -> None:
        """Refuse the first key no getter consumed."""
        unknown = [key for key in self.data if key not in self.seen]
        if unknown:
            known = ", ".join(sorted(self.seen)) or "none"
            raise self.error(unknown[0], f"unknown key (expected one of: {known})")

    def _take(self, key: str, kinds: tuple[type, ...], expected: str, default: object) -> object:
        self.seen.add(key)
        if key not in self.data:
            if isinstance(default, _Missing):
                raise self.error(key, f"missing (expected {expected})")
            return default
        value = self.data[key]
        # bool is an int in Python; a TOML `true` where a number is expected is still a mistake.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.error(key, f"expected {expected}, got {self._got(value)}")
        return value

    def _got(self, value: object) -> str:
        return describe_value(value) if not self.secret or not isinstance(value, str) else "a string"


def describe_value(value: object) -> str:
    """A TOML value as an error message shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)
