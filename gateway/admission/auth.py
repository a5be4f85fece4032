"""Client keys and the admin key: who may call the gateway, for which models, within which limits.

Client keys come from two places, merged:

- the environment variable named by ``[auth] api_keys_env``: comma-separated keys, each allowed
  every model, with the per-key defaults of ``[limits]``;
- the TOML file named by ``[auth] api_keys_file``, where each key has a name, its models and its
  own limits (``0`` means unlimited; an absent limit takes the ``[limits]`` default)::

      [[keys]]
      name = "team-a"                 # shown in logs and errors instead of the key
      key = "sk-gw-team-a-..."        # or key_sha256 = "<hex SHA-256 of the key>": then the
                                      # file holds no secret at all
      models = ["llama-3.3-70b"]      # optional; every model when absent
      requests_per_minute = 600
      tokens_per_minute = 200000
      max_in_flight = 16
      budget_usd = 25.0               # USD per budget_window (UTC calendar: day, week or month)
      budget_window = "day"
      team = "search"                 # groups keys: spend is reported per team, and a team
                                      # named in [[teams]] has a budget of its own
      [[teams]]
      name = "search"
      budget_usd = 500.0
      budget_window = "month"

Keys are held only as SHA-256 digests and compared in constant time. A key is known elsewhere
(Redis, logs) by its ``key_id``, derived from the digest, never by its value. Clients send a key
as ``Authorization: Bearer <key>`` (the OpenAI SDKs) or ``api-key: <key>`` (Azure-style).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.admission.spending.windows import BUDGET_WINDOWS, Budget
from gateway.config import AuthConfig, GatewayConfig, LimitsConfig
from gateway.toml_reader import MISSING, ConfigError, TableReader

_HEX = frozenset("0123456789abcdef")


def digest_of(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """One key's limits; ``0`` means unlimited."""

    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    max_in_flight: int = 0

    @classmethod
    def defaults(cls, limits: LimitsConfig) -> KeyLimits:
        return cls(
            requests_per_minute=limits.requests_per_minute_per_key,
            tokens_per_minute=limits.tokens_per_minute_per_key,
            max_in_flight=limits.max_in_flight_per_key,
        )


@dataclass(frozen=True, slots=True)
class ClientKey:
    """An authenticated caller. ``models`` None means every model."""

    name: str
    key_id: str
    """Stable across replicas and restarts, safe to log and to use in Redis keys."""
    limits: KeyLimits
    models: frozenset[str] | None = None
    digest: bytes = field(default=b"", repr=False)
    team: str | None = None
    budget: Budget | None = None
    """USD per calendar window; None: no budget of its own (its team's may still apply)."""

    def allows(self, model: str) -> bool:
        return self.models is None or model in self.models

    @classmethod
    def anonymous(cls, limits: KeyLimits) -> ClientKey:
        """The caller of a gateway without client keys (loopback-only dev mode, or explicitly open)."""
        return cls(name="anonymous", key_id="anonymous", limits=limits)

    @classmethod
    def from_digest(
        cls,
        name: str | None,
        digest: bytes,
        limits: KeyLimits,
        models: frozenset[str] | None = None,
        *,
        team: str | None = None,
        budget: Budget | None = None,
    ) -> ClientKey:
        key_id = "k" + digest.hex()[:16]
        return cls(
            name=name or key_id, key_id=key_id, limits=limits, models=models, digest=digest, team=team, budget=budget
        )


class KeyRing:
    """The client keys of one config. Usage::

    ring = KeyRing.from_config(config.auth, config.limits, [m.name for m in config.models], os.environ)
    caller = ring.authenticate(presented_key(scope["headers"]))   # None: refuse with 401
    """

    def __init__(
        self, keys: Sequence[ClientKey], sources: Sequence[str] = (), teams: Mapping[str, Budget] | None = None
    ) -> None:
        self.keys = tuple(keys)
        self.sources = tuple(sources)
        self.teams: dict[str, Budget] = dict(teams or {})
        """Teams with a budget of their own (``[[teams]]`` of the keys file), by name."""

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @classmethod
    def from_config(
        cls, auth: AuthConfig, limits: LimitsConfig, models: Iterable[str], environ: Mapping[str, str]
    ) -> KeyRing:
        """Read the keys from the environment and the keys file. Raises ``ConfigError`` (never naming a key)."""
        defaults = KeyLimits.defaults(limits)
        keys: list[ClientKey] = []
        origins: dict[bytes, str] = {}
        sources: list[str] = []
        teams: dict[str, Budget] = {}
        if auth.api_keys_env:
            raw = environ.get(auth.api_keys_env, "")
            values = [part.strip() for part in raw.split(",") if part.strip()]
            for index, value in enumerate(values):
                where = f"${auth.api_keys_env} (key {index + 1})"
                keys.append(_unique(ClientKey.from_digest(None, digest_of(value), defaults), where, origins))
            if values:
                sources.append(f"{len(values)} from ${auth.api_keys_env}")
        if auth.api_keys_file:
            from_file, teams = _read_key_file(Path(auth.api_keys_file), defaults, frozenset(models))
            for where, key in from_file:
                keys.append(_unique(key, where, origins))
            sources.append(f"{len(from_file)} from {Path(auth.api_keys_file).name}")
        return cls(keys, sources, teams)

    def authenticate(self, presented: str | None) -> ClientKey | None:
        """The key that matches ``presented``, compared against every key with no early exit."""
        if not presented:
            return None
        digest = digest_of(presented)
        found: ClientKey | None = None
        for key in self.keys:
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found

    def describe(self) -> str:
        """A one-line, secret-free summary for logs and ``gateway check``."""
        if not self.keys:
            return "no client keys"
        count = len(self.keys)
        return f"{count} client key{'s' if count != 1 else ''} ({', '.join(self.sources)})"


def _unique(key: ClientKey, where: str, origins: dict[bytes, str]) -> ClientKey:
    if key.digest in origins:
        raise ConfigError(f"{where}: the same client key is already configured at {origins[key.digest]}")
    origins[key.digest] = where
    return key


def _read_key_file(
    path: Path, defaults: KeyLimits, models: frozenset[str]
) -> tuple[list[tuple[str, ClientKey]], dict[str, Budget]]:
    """The keys of a keys file, each with where it was found, and its teams' budgets.

    Errors name the file and key path only."""
    source = path.name
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read keys file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        # Named by offset only: the bytes around it may be a key.
        raise ConfigError(f"{source}: not UTF-8 text (at byte offset {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        # tomllib's messages give a line and column, never the offending text.
        raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{source}: invalid TOML: arrays or tables nested too deeply") from exc
    root = TableReader(data, "", source, secret=True)
    teams: dict[str, Budget] = {}
    for table in root.tables("teams"):
        team = _team_name(table, "name")
        if team in teams:
            raise table.error("name", f'duplicate team name "{team}"')
        budget = _budget(table)
        if budget is None:
            raise table.error("budget_usd", "expected a budget in USD (a [[teams]] entry gives a team its budget)")
        teams[team] = budget
        table.finish()
    keys: list[tuple[str, ClientKey]] = []
    names: set[str] = set()
    for table in root.tables("keys"):
        name: str = table.text("name")
        if name in names:
            raise table.error("name", f'duplicate key name "{name}"')
        names.add(name)
        plain: str | None = table.text("key", None)
        hashed: str | None = table.text("key_sha256", None)
        if (plain is None) == (hashed is None):
            raise table.error(None, "expected exactly one of key or key_sha256")
        if plain is not None:
            if plain != plain.strip() or "," in plain:
                raise table.error("key", "must not contain commas or surrounding whitespace")
            digest = digest_of(plain)
        else:
            assert hashed is not None
            hashed = hashed.lower()
            if len(hashed) != 64 or not set(hashed) <= _HEX:
                raise table.error("key_sha256", "expected 64 hexadecimal digits (the SHA-256 of the key)")
            digest = bytes.fromhex(hashed)
        allowed = _allowed_models(table, models)
        limits = KeyLimits(
            requests_per_minute=table.integer("requests_per_minute", defaults.requests_per_minute, minimum=0),
            tokens_per_minute=table.integer("tokens_per_minute", defaults.tokens_per_minute, minimum=0),
            max_in_flight=table.integer("max_in_flight", defaults.max_in_flight, minimum=0),
        )
        member_of = _team_name(table, "team") if table.has("team") else None
        budget = _budget(table)
        table.finish()
        key = ClientKey.from_digest(name, digest, limits, allowed, team=member_of, budget=budget)
        keys.append((f"{source}: {table.path}", key))
    root.finish()
    return keys, teams


def _team_name(table: TableReader, field_name: str) -> str:
    team: str = table.text(field_name)
    if any(c in team for c in "{}"):
        # A team's name is the Redis hash tag of its counters; a brace would split the tag.
        raise table.error(field_name, 'must not contain "{" or "}"')
    return team


def _budget(table: TableReader) -> Budget | None:
    """``budget_usd`` and ``budget_window`` (default ``"month"``) of a key or a team; None when absent."""
    limit: float | None = table.number("budget_usd", None, positive=True)
    if limit is None:
        if table.has("budget_window"):
            raise table.error("budget_window", "only applies with budget_usd")
        return None
    return Budget(limit, table.choice("budget_window", BUDGET_WINDOWS, "month"))


def _allowed_models(table: TableReader, models: frozenset[str]) -> frozenset[str] | None:
    value = table.raw("models")
    if value is MISSING:
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise table.error("models", "expected an array of model names")
    for name in value:
        if name not in models:
            raise table.error("models", f'unknown model "{name}" (known: {", ".join(sorted(models))})')
    return frozenset(value)


@dataclass(frozen=True, slots=True)
class AdminKey:
    """The admin key's digest, or None when no admin key is configured."""

    digest: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, auth: AuthConfig, environ: Mapping[str, str], ring: KeyRing) -> AdminKey:
        value = environ.get(auth.admin_key_env, "").strip() if auth.admin_key_env else ""
        if not value:
            return cls()
        digest = digest_of(value)
        if ring.authenticate(value) is not None:
            raise ConfigError(f"${auth.admin_key_env}: the admin key must differ from every client key")
        return cls(digest)

    @property
    def configured(self) -> bool:
        return self.digest is not None

    def matches(self, presented: str | None) -> bool:
        if self.digest is None or not presented:
            return False
        return hmac.compare_digest(digest_of(presented), self.digest)


def load_keys(config: GatewayConfig, environ: Mapping[str, str]) -> tuple[KeyRing, AdminKey]:
    """The client keys and the admin key of ``config``. Raises ``ConfigError`` (never naming a key)."""
    ring = KeyRing.from_config(config.auth, config.limits, [m.name for m in config.models], environ)
    return ring, AdminKey.from_config(config.auth, environ, ring)


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key a request carries: ``Authorization: Bearer <key>``, else ``api-key: <key>`` (Azure's) or
    ``x-api-key: <key>`` (Anthropic's SDK sends its key there)."""
    bearer: str | None = None
    api_key: str | None = None
    for name, value in headers:
        if name == b"authorization" and bearer is None:
            text = value.decode("latin-1")
            bearer = text[7:].strip() if text[:7].lower() == "bearer " else ""
        elif name in (b"api-key", b"x-api-key") and api_key is None:
            api_key = value.decode("latin-1").strip()
    return bearer or api_key or None


@functools.lru_cache(maxsize=1024)
def is_loopback(host: str | None) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1, IPv4-mapped loopback).

    Cached: asked for every request, and parsing an address costs more than the rest of the key
    check; clients come from few distinct addresses, and the cache is bounded.
    """
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def exposure_notice(host: str, ring: KeyRing, admin: AdminKey, auth: AuthConfig) -> tuple[int, str]:
    """The start-up line (log level, message) saying who may call this gateway.

    Refuses (``ConfigError``) to serve a non-loopback host without client keys unless the
    config says ``allow_unauthenticated = true``.
    """
    if ring.enabled:
        admin_text = "admin key set" if admin.configured else "no admin key, so admin endpoints are disabled"
        return logging.INFO, f"client auth on: {ring.describe()}; {admin_text}"
    if is_loopback(host):
        variable = f"${auth.api_keys_env}" if auth.api_keys_env else "[auth] api_keys_env"
        return logging.WARNING, (
            f"client auth OFF: no client keys configured, so only loopback clients are served on {host} "
            f"(set {variable} or [auth] api_keys_file to require keys)"
        )
    if auth.allow_unauthenticated:
        return logging.WARNING, (
            f"client auth OFF on {host}: no client keys and [auth] allow_unauthenticated = true, so anyone may call"
        )
    raise ConfigError(
        f"refusing to serve on non-loopback host {host} without client keys: configure keys "
        "([auth] api_keys_env or api_keys_file) or set [auth] allow_unauthenticated = true"
    )
