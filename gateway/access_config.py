"""The ``[auth]`` and ``[limits]`` tables: who may call the gateway, and how much each caller may ask.

The keys themselves are never here: ``[auth]`` names the environment variables and the keys file
that hold them (``gateway.admission.auth`` reads those at start-up).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.toml_reader import TableReader


@dataclass(frozen=True, slots=True)
class AuthConfig:
    api_keys_env: str | None = "GATEWAY_API_KEYS"
    """Names the env var holding comma-separated client keys; unset or empty means no client auth."""
    api_keys_file: str | None = None
    """A TOML file of named client keys with per-key models and limits (see ``gateway.admission.auth``).
    Relative paths are read from the config file's directory."""
    admin_key_env: str | None = "GATEWAY_ADMIN_KEY"
    allow_unauthenticated: bool = False
    """With no client keys, the gateway serves loopback clients only, unless this says otherwise."""


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Bounds on what one request, one key and the whole replica may ask for. ``0`` means no limit.

    Rates are per key and per minute, shared by every replica through Redis when
    ``[stats] backend = "redis"``; in-flight counts are per replica.
    """

    max_header_bytes: int = 32 * 1024
    """Total size of a request's header names and values (431 above it)."""
    max_answer_bytes: int = 256 * 1024 * 1024
    """Largest whole (non-streamed) answer read from a provider: past it the attempt fails (the next deployment is
    asked, else 502) rather than the gateway's memory growing with whatever the provider sends. Generous: an
    embeddings answer of a large batch in floats runs to tens of MB. A stream is relayed as it comes."""
    max_json_depth: int = 64
    """Deepest nesting of arrays and objects in a request body."""
    max_messages: int = 2048
    max_n: int = 8
    """Largest ``n`` (choices per request) accepted."""
    max_tokens: int = 0
    """Ceiling on ``max_tokens`` / ``max_completion_tokens``; larger values are refused with 400."""
    max_in_flight: int = 1024
    """Requests this replica serves at once; above it, 503."""
    max_in_flight_per_key: int = 0
    """Default for keys that set no ``max_in_flight`` of their own; above it, 429."""
    requests_per_minute_per_key: int = 0
    """Default for keys that set no ``requests_per_minute`` of their own."""
    tokens_per_minute_per_key: int = 0
    """Default for keys that set no ``tokens_per_minute``: prompt estimate + ``max_tokens`` × ``n``
    at admission (else its likely size, docs/limits.md), corrected with the output actually produced."""


def parse_auth(table: TableReader) -> AuthConfig:
    default = AuthConfig()
    auth = AuthConfig(
        api_keys_env=table.text("api_keys_env", default.api_keys_env),
        api_keys_file=table.text("api_keys_file", default.api_keys_file),
        admin_key_env=table.text("admin_key_env", default.admin_key_env),
        allow_unauthenticated=table.flag("allow_unauthenticated", default.allow_unauthenticated),
    )
    table.finish()
    return auth


def parse_limits(table: TableReader) -> LimitsConfig:
    default = LimitsConfig()
    limits = LimitsConfig(
        max_header_bytes=table.integer("max_header_bytes", default.max_header_bytes, minimum=1),
        max_answer_bytes=table.integer("max_answer_bytes", default.max_answer_bytes, minimum=1),
        max_json_depth=table.integer("max_json_depth", default.max_json_depth, minimum=1),
        max_messages=table.integer("max_messages", default.max_messages, minimum=0),
        max_n=table.integer("max_n", default.max_n, minimum=1),
        max_tokens=table.integer("max_tokens", default.max_tokens, minimum=0),
        max_in_flight=table.integer("max_in_flight", default.max_in_flight, minimum=0),
        max_in_flight_per_key=table.integer("max_in_flight_per_key", default.max_in_flight_per_key, minimum=0),
        requests_per_minute_per_key=table.integer(
            "requests_per_minute_per_key", default.requests_per_minute_per_key, minimum=0
        ),
        tokens_per_minute_per_key=table.integer(
            "tokens_per_minute_per_key", default.tokens_per_minute_per_key, minimum=0
        ),
    )
    table.finish()
    return limits
