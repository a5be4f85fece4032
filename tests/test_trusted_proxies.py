"""Whose ``X-Forwarded-For`` is believed (``[server] trusted_proxies``): the server ``gateway serve`` runs wraps the
app in uvicorn's own proxy-headers middleware with exactly those addresses, so the client address the gateway
reads (loopback privileges, the access log) is the proxy's word only when the proxy is trusted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config import ConfigError, parse_config
from gateway.server import uvicorn_config

XFF = [(b"x-forwarded-for", b"203.0.113.7")]


def config_with(server: dict[str, Any]) -> Any:
    return parse_config(
        {
            "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1"}],
            "models": [{"name": "m", "deployments": [{"provider": "p", "model": "m"}]}],
            "server": server,
        },
        source="test.toml",
    )


def client_seen(server: dict[str, Any], peer: str) -> str:
    """The client address the app reads for a request from ``peer`` that says it forwards 203.0.113.7."""
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["client"][0])

    served = uvicorn_config(app, config_with(server), "127.0.0.1", 0, "warning")
    served.load()
    scope = {"type": "http", "scheme": "http", "client": (peer, 5000), "headers": XFF, "path": "/", "query_string": b""}

    async def nothing() -> dict[str, Any]:
        return {"type": "http.request"}

    async def ignore(message: Any) -> None:
        pass

    asyncio.run(served.loaded_app(scope, nothing, ignore))
    return seen[0]


def test_by_default_only_a_loopback_proxy_is_believed() -> None:
    assert client_seen({}, "127.0.0.1") == "203.0.113.7"  # a reverse proxy on this host speaks for its client
    assert client_seen({}, "198.51.100.9") == "198.51.100.9"  # a remote client's own header is ignored


def test_trusted_proxies_names_who_is_believed() -> None:
    assert client_seen({"trusted_proxies": []}, "127.0.0.1") == "127.0.0.1"
    assert client_seen({"trusted_proxies": ["10.0.0.0/8"]}, "10.1.2.3") == "203.0.113.7"
    assert client_seen({"trusted_proxies": ["10.0.0.0/8"]}, "127.0.0.1") == "127.0.0.1"


def test_a_trusted_proxy_must_be_an_address() -> None:
    with pytest.raises(ConfigError, match="trusted_proxies"):
        config_with({"trusted_proxies": ["proxy.internal"]})
