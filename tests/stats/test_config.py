"""The ``[stats]`` keys this backend adds: parsed, defaulted and validated with precise messages."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, StatsConfig, parse_config


def config_with(stats: dict[str, Any]) -> StatsConfig:
    data = {
        "stats": stats,
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:1/v1"}],
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "u"}]}],
    }
    return parse_config(data, source="test.toml").stats


def test_redis_keys_parse() -> None:
    stats = config_with(
        {
            "backend": "redis",
            "redis_url": "redis://:pw@10.0.0.5:6380/2",
            "key_prefix": "gw-prod",
            "flush_interval_s": 0.1,
            "buffer_limit": 5000,
            "redis_timeout_s": 0.5,
            "redis_max_connections": 2,
        }
    )
    assert (stats.backend, stats.key_prefix, stats.flush_interval_s, stats.buffer_limit) == (
        "redis",
        "gw-prod",
        0.1,
        5000,
    )
    assert (stats.redis_timeout_s, stats.redis_max_connections) == (0.5, 2)
    assert config_with({}) == StatsConfig()


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        ({"flush_interval_s": 0}, "test.toml: stats.flush_interval_s: expected a number > 0, got 0"),
        ({"flush_interval_s": 11}, "test.toml: stats.flush_interval_s: expected at most slice_s (10), got 11"),
        ({"buffer_limit": 0}, "test.toml: stats.buffer_limit: expected an integer >= 1, got 0"),
        ({"redis_timeout_s": -1}, "test.toml: stats.redis_timeout_s: expected a number > 0, got -1"),
        ({"redis_max_connections": 0}, "test.toml: stats.redis_max_connections: expected an integer >= 1, got 0"),
        ({"key_prefix": "a{b}"}, 'test.toml: stats.key_prefix: must not contain "{" or "}", got "a{b}"'),
        ({"flush_interval": 1}, "test.toml: stats.flush_interval: unknown key"),
    ],
)
def test_invalid_values_are_named(stats: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_with(stats)
    assert str(error.value).startswith(message)
