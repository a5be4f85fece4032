"""The credentials ``[stats]`` names for Redis (by environment variable, never by value), and its TLS files.

Resolved once per process, at start-up, so that a missing variable or file stops the gateway with one
line naming the key rather than failing every connection later (``gateway check`` runs it too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import ConfigError, StatsConfig


@dataclass(frozen=True, slots=True)
class RedisSecrets:
    """Credentials from the environment; never logged (``repr`` shows none of them)."""

    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)


def resolve_redis_secrets(config: StatsConfig, environ: Mapping[str, str], source: str = "config") -> RedisSecrets:
    """Each credential the config names, from ``environ``; a named but unset variable is a ``ConfigError``.

    Also checks that the TLS files exist, so that a typo stops start-up rather than every connection.
    """
    missing: list[str] = []
    values: dict[str, str | None] = {}
    for key, what in (
        ("redis_username_env", "the Redis user name"),
        ("redis_password_env", "the Redis password"),
        ("redis_sentinel_username_env", "the sentinels' user name"),
        ("redis_sentinel_password_env", "the sentinels' password"),
    ):
        name: str | None = getattr(config, key)
        value = environ.get(name, "") if name else ""
        if name and not value:
            missing.append(f"stats.{key}: environment variable {name} is not set (expected {what})")
        values[key] = value or None
    for key in ("redis_tls_ca_file", "redis_tls_cert_file", "redis_tls_key_file"):
        path: str | None = getattr(config, key)
        if path is not None and not Path(path).is_file():
            missing.append(f'stats.{key}: no such file "{path}"')
    if missing:
        raise ConfigError(f"{source}: " + "; ".join(missing))
    return RedisSecrets(
        username=values["redis_username_env"],
        password=values["redis_password_env"],
        sentinel_username=values["redis_sentinel_username_env"],
        sentinel_password=values["redis_sentinel_password_env"],
    )
