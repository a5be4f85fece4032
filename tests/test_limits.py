"""Request limits: body shape, header and body size (in the app and at the protocol), and upstream
URLs that no request can steer."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.admission.limits import check_shape, nesting_exceeds
from gateway.app import AppOptions, create_app
from gateway.config import LimitsConfig, parse_config
from gateway.errors import InvalidRequest
from gateway.server import header_limited_protocol, uvicorn_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def test_nesting_depth() -> None:
    assert not nesting_exceeds({"a": [1, {"b": 2}]}, 3)
    assert nesting_exceeds({"a": [1, {"b": [2]}]}, 3)
    assert not nesting_exceeds("text", 1)
    deep: Any = 0
    for _ in range(100_000):  # far past the recursion limit: the walk is iterative
        deep = [deep]
    assert nesting_exceeds(deep, 64)


def test_check_shape() -> None:
    limits = LimitsConfig(max_messages=2, max_n=4, max_tokens=100)
    assert check_shape({"messages": [{}, {}], "n": 3}, "chat", 100, limits) == 3
    assert check_shape({"prompt": "x", "n": 2, "best_of": 4}, "completions", None, limits) == 4
    assert check_shape({"input": "x", "n": 99}, "embeddings", None, limits) == 1
    cases: list[tuple[dict[str, Any], int | None, str | None]] = [
        ({"messages": [{}, {}, {}]}, None, "messages"),
        ({"messages": [], "n": 5}, None, "n"),
        ({"messages": [], "n": 0}, None, "n"),
        ({"messages": [], "n": True}, None, "n"),
        ({"messages": [], "n": "2"}, None, "n"),
        ({"messages": [], "max_tokens": 101}, 101, "max_tokens"),
        ({"messages": [], "max_completion_tokens": 101}, 101, "max_completion_tokens"),
    ]
    for body, max_tokens, param in cases:
        with pytest.raises(InvalidRequest) as caught:
            check_shape(body, "chat", max_tokens, limits)
        assert caught.value.param == param, body
    with pytest.raises(InvalidRequest, match="best_of"):
        check_shape({"prompt": "x", "best_of": 5}, "completions", None, limits)


@pytest.fixture
def limited(fakes: Fakes) -> Iterator[Callable[..., tuple[Gateway, FakeServer]]]:
    servers = GatewayServers()

    def start(
        limits: dict[str, int] | None = None, server: dict[str, int] | None = None, *, protocol_limit: int = 0
    ) -> tuple[Gateway, FakeServer]:
        fake = fakes.start("p")
        config = parse_config(
            {
                "providers": [{"name": "p", "base_url": fake.base_url}],
                "models": [
                    {"name": name, "deployments": [{"provider": "p", "model": "up"}]} for name in ("m", "org/m:free")
                ],
                "limits": limits or {},
                "server": server or {},
            },
            source="test.toml",
        )
        app = create_app(config, AppOptions(environ={}))
        # With protocol_limit, the app runs under the protocol class `gateway serve` uses.
        http = header_limited_protocol(protocol_limit) if protocol_limit else None
        return servers.serve(app, http=http), fake

    yield start
    servers.stop()


def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def test_shape_limits_over_http(limited: Callable[..., tuple[Gateway, FakeServer]]) -> None:
    gateway, fake = limited({"max_n": 2, "max_messages": 3, "max_tokens": 50, "max_json_depth": 8})
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        assert len(client.chat.completions.create(model="m", messages=MESSAGES, n=2, max_tokens=50).choices) == 2
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=MESSAGES, n=3)
        assert caught.value.param == "n" and "limit of 2" in caught.value.message
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=MESSAGES * 4)
        assert caught.value.param == "messages" and "4 messages exceed" in caught.value.message
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=MESSAGES, max_completion_tokens=51)
        assert caught.value.param == "max_completion_tokens" and "ceiling of 50" in caught.value.message
    with httpx.Client(base_url=gateway.base_url) as http:
        for depth in (20, 200_000):
            raw = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": ' + "[" * depth + "]" * depth
            response = http.post("/chat/completions", content=raw + "}")
            assert response.status_code == 400, depth
            assert _error(response)["code"] == "invalid_json"
    assert fake.app.state.requests == 1


def test_body_and_header_size_in_the_app(limited: Callable[..., tuple[Gateway, FakeServer]]) -> None:
    gateway, fake = limited({"max_header_bytes": 2048}, {"max_body_bytes": 1000})
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}
    with httpx.Client(base_url=gateway.base_url) as http:
        response = http.post("/chat/completions", json=body)
        assert response.status_code == 413 and _error(response)["code"] == "request_too_large"
        response = http.post("/chat/completions", json={"model": "m"}, headers={"x-pad": "y" * 3000})
        assert response.status_code == 431 and _error(response)["code"] == "request_headers_too_large"
        response = http.get("/models", headers={"x-pad": "y" * 3000})
        assert response.status_code == 431
        assert http.post("/chat/completions", json={"model": "m", "messages": MESSAGES}).status_code == 200
    assert fake.app.state.requests == 1


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (head and a Content-Length body) from a raw socket."""
    data = b""
    sock.settimeout(5)
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_header_limit_at_the_protocol(limited: Callable[..., tuple[Gateway, FakeServer]]) -> None:
    """An endless header is cut off after about the limit, before the app (or httptools' buffer) holds it."""
    gateway, _ = limited({"max_header_bytes": 4096}, protocol_limit=4096)
    with socket.create_connection(("127.0.0.1", gateway.server.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert _read_response(sock).startswith(b"HTTP/1.1 200")
        # Same connection: the next request's head counts from zero, and is refused past the limit.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-endless: ")
        sent, refused = 0, b""
        deadline = time.monotonic() + 10
        while sent < 8 * 1024 * 1024 and time.monotonic() < deadline:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                refused = _read_response(sock)
                break
            try:
                sock.sendall(b"a" * 1024)
            except (BrokenPipeError, ConnectionResetError):
                refused = _read_response(sock)
                break
            sent += 1024
        # Without the protocol's limit nothing would answer: the app never sees a head that does not end.
        # (How much was sent before the answer came depends on the kernel's socket buffers, not on the server.)
        assert refused.startswith(b"HTTP/1.1 431"), refused[:100]
    # A body is not a head: a large body under a small head limit is served.
    with httpx.Client(base_url=gateway.base_url) as http:
        response = http.post("/chat/completions", json={"model": "m", "messages": MESSAGES, "pad": "z" * 50_000})
        assert response.status_code == 200


def test_no_request_can_steer_the_upstream_url(
    fakes: Fakes, limited: Callable[..., tuple[Gateway, FakeServer]]
) -> None:
    """Model names, headers and routing fields that look like hosts or paths reach nothing but the configured URL."""
    canary = fakes.start("canary")
    gateway, fake = limited()
    hostile_models = [
        "../m",
        "m/../../admin",
        "m/..%2F..%2Fadmin",
        canary.base_url,
        canary.url + "/v1/chat/completions#",
        "//127.0.0.1:" + str(canary.server.port),
        "m?x=1",
        "m\r\nHost: evil",
    ]
    with httpx.Client(base_url=gateway.base_url) as http:
        for model in hostile_models:
            response = http.post("/chat/completions", json={"model": model, "messages": MESSAGES})
            assert response.status_code == 404, model
        hostile_headers = {
            "host": f"127.0.0.1:{canary.server.port}",
            "x-forwarded-host": f"127.0.0.1:{canary.server.port}",
            "x-forwarded-proto": "https",
            "x-original-url": "/admin",
            "x-rewrite-url": "/admin",
            "forwarded": f"host=127.0.0.1:{canary.server.port}",
            "x-gateway-provider": "canary",
        }
        # A provider override may only name configured providers: a URL there is a 400.
        steer = {"model": "org/m:free", "messages": MESSAGES, "provider": {"order": [canary.base_url]}}
        refused = http.post("/chat/completions", json=steer)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "provider.order"
        body = {
            "model": "org/m:free",
            "messages": MESSAGES,
            "base_url": canary.base_url,
            "api_base": canary.base_url,
            "url": canary.base_url,
        }
        for path in ("/chat/completions?base_url=" + canary.base_url, "/chat/completions"):
            response = http.post(path, json=body, headers=hostile_headers)
            assert response.status_code == 200, response.text
        assert http.post("/chat/completions/../../../admin", json=body).status_code == 404
    assert canary.app.state.requests == 0
    recorded = fake.app.state.recorded
    assert [r.path for r in recorded] == ["/v1/chat/completions", "/v1/chat/completions"]
    for request in recorded:
        assert request.headers["host"] == f"127.0.0.1:{fake.server.port}"
        assert request.body is not None and request.body["model"] == "up" and "provider" not in request.body
        assert "x-forwarded-host" not in request.headers and "x-gateway-provider" not in request.headers


def test_bodies_python_accepts_but_json_and_unicode_do_not(
    limited: Callable[..., tuple[Gateway, FakeServer]],
) -> None:
    """NaN and lone surrogate escapes parse in Python but cannot be sent on: 400, not a 500."""
    gateway, fake = limited()
    with httpx.Client(base_url=gateway.base_url) as http:
        for content in ("NaN", "-Infinity", '"\\ud800"', '"a\\udfffb"', '{"\\udc00": 1}'):
            raw = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": ' + content + "}"
            response = http.post("/chat/completions", content=raw)
            assert response.status_code == 400, content
            assert _error(response)["code"] == "invalid_json"
        pair = '{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00 \\\\ud800"}]}'
        assert http.post("/chat/completions", content=pair).status_code == 200
    assert fake.app.state.recorded[0].body is not None
    assert fake.app.state.recorded[0].body["messages"][0]["content"] == "\U0001f600 \\ud800"


def test_idle_client_connections_outlive_the_clients_own_pool_expiry() -> None:
    # httpx (and so the OpenAI SDK) drops a pooled connection idle for 5 s, load balancers after 60 s: the server
    # must not close one at the moment a client reuses it (that request fails with no response at all).
    config = parse_config(
        {
            "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1"}],
            "models": [{"name": "m", "deployments": [{"provider": "p", "model": "m"}]}],
        },
        source="test.toml",
    )
    served = uvicorn_config(object(), config, "127.0.0.1", 0, "warning")
    assert served.timeout_keep_alive > httpx.Limits().keepalive_expiry  # type: ignore[operator]
    assert served.timeout_keep_alive >= 60


def test_nesting_depth_is_the_deepest_container_of_any_branch() -> None:
    """The depth counts containers only (scalars inside the deepest do not add a level), takes the deepest
    branch wherever it is, and a scalar body nests nowhere."""
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}, {"role": "assistant"}],
        "tools": [{"function": {"parameters": {"properties": {"a": {"type": "string"}}}}}],
    }
    # tools → [ → {function → {parameters → {properties → {a → {type}: 7 containers deep.
    assert not nesting_exceeds(body, 7)
    assert nesting_exceeds(body, 6)
    assert not nesting_exceeds([[], {}, [1, "x"]], 2)
    assert nesting_exceeds([[], {}, [1, ["x"]]], 2)
    assert not nesting_exceeds(None, 0)
    assert nesting_exceeds({}, 0)
