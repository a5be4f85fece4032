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
            "redis_url": "redis://10.0.0.5:6380/2",
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


def test_cluster_and_sentinel_keys_parse() -> None:
    cluster = config_with(
        {
            "backend": "redis",
            "redis_mode": "cluster",
            "redis_url": "rediss://10.0.0.5:7000",
            "redis_cluster_nodes": ["10.0.0.6:7000", "[fd00::7]:7000"],
            "redis_password_env": "REDIS_PASSWORD",
            "redis_tls_ca_file": "/etc/ca.pem",
            "redis_tls_verify": "ca",
            "redis_request_timeout_s": 0.25,
            "redis_request_max_connections": 64,
            "redis_retries": 2,
            "redis_backoff_min_s": 0.1,
            "redis_backoff_max_s": 2,
        }
    )
    assert cluster.redis_mode == "cluster" and cluster.redis_tls  # from the rediss:// scheme
    assert cluster.redis_cluster_nodes == ("10.0.0.6:7000", "[fd00::7]:7000")
    assert (cluster.redis_tls_ca_file, cluster.redis_tls_verify) == ("/etc/ca.pem", "ca")
    assert (cluster.redis_request_timeout_s, cluster.redis_request_max_connections, cluster.redis_retries) == (
        0.25,
        64,
        2,
    )
    assert (cluster.redis_backoff_min_s, cluster.redis_backoff_max_s) == (0.1, 2.0)
    assert cluster.redis_target == "cluster via rediss://10.0.0.5:7000"

    sentinel = config_with(
        {
            "backend": "redis",
            "redis_mode": "sentinel",
            "redis_sentinels": ["10.0.0.5:26379", "10.0.0.6:26379"],
            "redis_sentinel_service": "mymaster",
            "redis_sentinel_password_env": "SENTINEL_PASSWORD",
            "redis_db": 3,
            "redis_tls": True,
        }
    )
    assert (sentinel.redis_mode, sentinel.redis_sentinel_service, sentinel.redis_db) == ("sentinel", "mymaster", 3)
    assert sentinel.redis_tls and sentinel.redis_sentinel_password_env == "SENTINEL_PASSWORD"
    assert sentinel.redis_target == "sentinel service mymaster via 10.0.0.5:26379, 10.0.0.6:26379"
    assert not config_with({"redis_url": "redis://h:1/0"}).redis_tls


SENTINEL = {"redis_mode": "sentinel", "redis_sentinels": ["h:26379"], "redis_sentinel_service": "mymaster"}


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        (
            {"redis_mode": "replicated"},
            "test.toml: stats.redis_mode: expected one of 'standalone', 'cluster', 'sentinel'",
        ),
        (
            {"redis_url": "redis://user:pw@h:6379/0"},
            "test.toml: stats.redis_url: must not contain credentials (name them with redis_password_env)",
        ),
        (
            {"redis_sentinels": ["h:26379"]},
            'test.toml: stats.redis_sentinels: only applies with redis_mode = "sentinel"',
        ),
        (
            {"redis_cluster_nodes": ["h:7000"]},
            'test.toml: stats.redis_cluster_nodes: only applies with redis_mode = "cluster"',
        ),
        ({"redis_db": 2}, 'test.toml: stats.redis_db: only applies with redis_mode = "sentinel"'),
        (
            {"redis_mode": "cluster", "redis_cluster_nodes": ["h"]},
            'test.toml: stats.redis_cluster_nodes[0]: expected "host:port" with a port 1-65535, got "h"',
        ),
        (
            {"redis_mode": "cluster", "redis_cluster_nodes": "h:7000"},
            'test.toml: stats.redis_cluster_nodes: expected an array of strings, got "h:7000"',
        ),
        (
            {"redis_mode": "cluster", "redis_url": "redis://h:7000/2"},
            'test.toml: stats.redis_url: a cluster has only database 0, got "/2"',
        ),
        (
            {"redis_mode": "cluster", "redis_url": "unix:///run/redis.sock"},
            "test.toml: stats.redis_url: a cluster is reached over TCP",
        ),
        ({"redis_mode": "sentinel"}, 'test.toml: stats.redis_sentinels: expected at least one "host:port"'),
        (
            {"redis_mode": "sentinel", "redis_sentinels": ["h:26379"]},
            "test.toml: stats.redis_sentinel_service: missing (expected the monitored name",
        ),
        (
            {**SENTINEL, "redis_url": "redis://h:6379/0"},
            'test.toml: stats.redis_url: not used with redis_mode = "sentinel"',
        ),
        ({**SENTINEL, "redis_sentinels": ["h:0"]}, 'test.toml: stats.redis_sentinels[0]: expected "host:port"'),
        ({"redis_tls": True}, "test.toml: stats.redis_tls: follows the URL here: use a rediss:// URL for TLS"),
        (
            {"redis_tls_ca_file": "ca.pem"},
            "test.toml: stats.redis_tls_ca_file: only applies with TLS (a rediss:// URL)",
        ),
        (
            {**SENTINEL, "redis_tls_verify": "none"},
            "test.toml: stats.redis_tls_verify: only applies with TLS (redis_tls = true)",
        ),
        (
            {"redis_url": "rediss://h:6379/0", "redis_tls_verify": "sometimes"},
            "test.toml: stats.redis_tls_verify: expected one of 'full', 'ca', 'none'",
        ),
        (
            {"redis_url": "rediss://h:6379/0", "redis_tls_cert_file": "c.pem"},
            "test.toml: stats.redis_tls_key_file: a client certificate needs both",
        ),
        (
            {"redis_backoff_min_s": 2, "redis_backoff_max_s": 1},
            "test.toml: stats.redis_backoff_max_s: expected at least redis_backoff_min_s (2)",
        ),
        ({"redis_retries": 11}, "test.toml: stats.redis_retries: expected at most 10, got 11"),
        ({"redis_retries": -1}, "test.toml: stats.redis_retries: expected an integer >= 0, got -1"),
        (
            {"redis_request_timeout_s": 0},
            "test.toml: stats.redis_request_timeout_s: expected a number > 0, got 0",
        ),
        (
            {"redis_request_max_connections": 0},
            "test.toml: stats.redis_request_max_connections: expected an integer >= 1, got 0",
        ),
        ({"redis_password_env": ""}, "test.toml: stats.redis_password_env: expected a non-empty string"),
    ],
)
def test_invalid_redis_keys_are_named(stats: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_with(stats)
    assert str(error.value).startswith(message), str(error.value)
