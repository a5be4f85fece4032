"""A success status whose body is a provider's error object: read as the error it is, not as an answer.

Why: some providers and proxies answer a failed request with HTTP 200 and ``{"error": {…}}`` (or Anthropic's
``{"type": "error", …}``), a stream request included. A whole answer was relayed as a success; a stream reached
the client as "stream ended before any output", the provider's words lost, and a fault of the request (context
length, an invalid parameter) was tried on every other deployment instead of being relayed. Each test stages
the answer on a raw loopback socket (``tests.raw_upstream``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.config import GatewayConfig
from gateway.errors import error_envelope
from tests.raw_upstream import RawUpstream
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
POLICY = {"extends": "fixed-order", "first_token_timeout_s": 5.0, "idle_timeout_s": 2.0, "connect_timeout_s": 1.0}
CHAT = {"model": "m", "messages": MESSAGES}
TOO_LONG = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."

REQUEST_FAULTS: dict[str, dict[str, Any]] = {
    "openai": {"error": {"message": "Invalid 'temperature': 7", "type": "invalid_request_error", "code": None}},
    "anthropic": {"type": "error", "error": {"type": "invalid_request_error", "message": "Invalid 'temperature': 7"}},
    "vllm": {"object": "error", "message": "Invalid 'temperature': 7", "type": "BadRequestError", "code": 400},
}
PROVIDER_FAULTS: dict[str, dict[str, Any]] = {
    "openai": {"error": {"message": "The server had an error", "type": "server_error", "code": None}},
    "anthropic": {"type": "error", "error": {"type": "overloaded_error", "message": "The server had an error"}},
}


@pytest.fixture
def answering(raw: Callable[..., RawUpstream]) -> Callable[[dict[str, Any]], RawUpstream]:
    """An upstream that answers every request 200 with ``body`` as a whole JSON answer."""

    def start(body: dict[str, Any]) -> RawUpstream:
        data = json.dumps(body).encode()
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(data)
        return raw("stale", head + data)

    return start


def config(first: RawUpstream, others: list[FakeServer] | None = None) -> GatewayConfig:
    return gateway_config([first, *(others or [])], base_policy=POLICY)


def outcomes(gateway: Gateway, count: int) -> list[tuple[str, str]]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    return [(s.provider, s.outcome) for s in gateway.samples.samples]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("shape", sorted(REQUEST_FAULTS))
def test_a_200_error_that_blames_the_request_is_relayed_as_its_400_not_tried_elsewhere(
    fakes: Fakes,
    start_gateway: StartGateway,
    answering: Callable[[dict[str, Any]], RawUpstream],
    shape: str,
    stream: bool,
) -> None:
    body = REQUEST_FAULTS[shape]
    upstream = answering(body)
    gateway = start_gateway(config(upstream, [fakes.start("b")]))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == body  # the client's own API: relayed as the provider sent it
    assert response.headers["x-gateway-attempts"] == "1"
    assert outcomes(gateway, 1) == [("raw", "client_error")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_200_context_length_error_is_relayed_with_the_providers_words(
    start_gateway: StartGateway, answering: Callable[[dict[str, Any]], RawUpstream], stream: bool
) -> None:
    # Before: a whole answer was a 200 "success"; a stream a 502 "stream ended before any output", the words lost.
    error = {
        "message": TOO_LONG,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    upstream = answering({"error": error})
    gateway = start_gateway(config(upstream))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    assert upstream.connections == 1
    assert outcomes(gateway, 1) == [("raw", "client_error")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_200_error_that_blames_the_request_reaches_a_translated_client_in_its_apis_shape(
    start_gateway: StartGateway, answering: Callable[[dict[str, Any]], RawUpstream], stream: bool
) -> None:
    # The provider speaks chat; the client the Messages API: the error is translated, as a 400's would be.
    gateway = start_gateway(config(answering(REQUEST_FAULTS["openai"])))
    request = {"model": "m", "max_tokens": 8, "messages": MESSAGES, "stream": stream}
    response = httpx.post(gateway.base_url + "/messages", json=request, timeout=10)
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert "Invalid 'temperature': 7" in answer["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("shape", sorted(PROVIDER_FAULTS))
def test_a_200_error_of_the_provider_falls_back_else_is_a_502_with_its_words(
    fakes: Fakes,
    start_gateway: StartGateway,
    answering: Callable[[dict[str, Any]], RawUpstream],
    shape: str,
    stream: bool,
) -> None:
    gateway = start_gateway(config(answering(PROVIDER_FAULTS[shape]), [fakes.start("b")]))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
    assert response.status_code == 200, response.text
    assert (response.headers["x-gateway-provider"], response.headers["x-gateway-attempts"]) == ("b", "2")
    assert outcomes(gateway, 2) == [("raw", "upstream_error"), ("b", "ok")]

    alone = start_gateway(config(answering(PROVIDER_FAULTS[shape])))
    response = httpx.post(alone.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
    assert response.status_code == 502, response.text
    message = response.json()["error"]["message"]
    assert message.endswith("raw: upstream answered 200 with an error: The server had an error"), message
    assert outcomes(alone, 1)[-1] == ("raw", "upstream_error")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"error": {"message": "m"}}', {"message": "m"}),
        (b'{"error": "m"}', "m"),
        (b'{"type": "error", "error": {"type": "api_error"}}', {"type": "api_error"}),
        (b'{"object": "error", "message": "m"}', {"object": "error", "message": "m"}),
        (b'{"id": "r", "object": "response", "status": "completed", "error": null}', None),
        (b'{"id": "r", "object": "response", "status": "failed", "error": {"code": "x"}}', None),
        (b'{"object": "chat.completion", "choices": [{"message": {"content": "\\"error\\": {}"}}]}', None),
        (b'{"error": null}', None),
        (b'[{"error": {"message": "m"}}]', None),
        (b"not json", None),
    ],
)
def test_only_a_body_that_is_nothing_but_an_error_reads_as_one(body: bytes, error: object) -> None:
    assert error_envelope(body) == error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_messages_servers_openai_shaped_400_reaches_an_anthropic_client_in_anthropic_shape(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], stream: bool
) -> None:
    """llama.cpp's server speaks the Messages API but answers its errors there in OpenAI's shape (its body for a
    request with tools to a server started without ``--jinja``): relayed as it came, an Anthropic client got no
    ``type: error`` envelope."""
    data = json.dumps({"error": {"code": 400, "message": LLAMA_CPP_FAULT, "type": "invalid_request_error"}}).encode()
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: %d\r\n\r\n"
    upstream = raw("stale", head % len(data) + data)
    gateway = start_gateway(gateway_config([upstream], base_policy=POLICY, provider_options=MESSAGES_ONLY))
    request = {"model": "m", "max_tokens": 8, "messages": MESSAGES, "stream": stream}
    response = httpx.post(gateway.base_url + "/messages", json=request, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": LLAMA_CPP_FAULT}}
    assert upstream.connections == 1


LLAMA_CPP_FAULT = "tools param requires --jinja flag"
MESSAGES_ONLY = {"raw": {"apis": ["messages"]}}
