"""A compressed request body: read as plain JSON and forwarded plain, or refused in the client's API shape.

Why: the gateway rewrites every body it forwards (the model, at least), so the client's ``Content-Encoding``
describes bytes the provider never gets. Before, a gzip body was refused as "not valid JSON: 'utf-8' codec
can't decode byte 0x8b", and a coding header sent with a plain body went on to the provider beside the
gateway's plain bytes (which a real provider then fails to decompress).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable

import httpx
import pytest

from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
MAX_BODY = 4096
CHAT = json.dumps({"model": "m", "messages": MESSAGES}).encode()
ANTHROPIC = json.dumps({"model": "m", "max_tokens": 8, "messages": MESSAGES}).encode()
CODINGS: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "deflate": zlib.compress}


def _gateway(fakes: Fakes, start_gateway: StartGateway) -> tuple[Gateway, FakeServer]:
    provider = fakes.start("a")
    return start_gateway(gateway_config([provider], extra={"server": {"max_body_bytes": MAX_BODY}})), provider


def _post(gateway: Gateway, path: str, body: bytes, coding: str, **headers: str) -> httpx.Response:
    sent = {"content-type": "application/json", "content-encoding": coding, **headers}
    return httpx.post(gateway.base_url + path, content=body, headers=sent, timeout=10)


@pytest.mark.parametrize("coding", sorted(CODINGS))
@pytest.mark.parametrize(("path", "body"), [("/chat/completions", CHAT), ("/messages", ANTHROPIC)])
def test_a_compressed_body_is_read_and_forwarded_plain(
    fakes: Fakes, start_gateway: StartGateway, coding: str, path: str, body: bytes
) -> None:
    gateway, provider = _gateway(fakes, start_gateway)
    response = _post(gateway, path, CODINGS[coding](body), coding, **{"content-digest": "sha-256=:x:"})
    assert response.status_code == 200, response.text
    (recorded,) = provider.app.state.recorded
    assert recorded.body is not None and recorded.body["messages"] == MESSAGES  # the provider read plain JSON
    # The client's body's coding and digest describe bytes the provider never gets.
    assert "content-encoding" not in recorded.headers and "content-digest" not in recorded.headers


def test_a_coding_header_on_a_plain_body_is_not_forwarded(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, provider = _gateway(fakes, start_gateway)
    response = _post(gateway, "/chat/completions", CHAT, "identity")
    assert response.status_code == 200, response.text
    (recorded,) = provider.app.state.recorded
    assert "content-encoding" not in recorded.headers


@pytest.mark.parametrize(
    ("coding", "body", "status", "words"),
    [
        ("br", CHAT, 415, "request body content-encoding 'br' is not supported (use gzip, or none)"),
        ("zstd", b"(\xb5/\xfd", 415, "request body content-encoding 'zstd' is not supported (use gzip, or none)"),
        ("gzip", CHAT, 400, "request body is not valid gzip: Error -3 while decompressing data"),
        ("gzip", gzip.compress(CHAT)[:-12], 400, "request body is not valid gzip: it is cut short"),
        ("gzip", gzip.compress(b" " * 1_000_000), 413, f"request body exceeds the limit of {MAX_BODY} bytes once"),
    ],
    ids=["br", "zstd", "not-gzip", "cut-short", "bomb"],
)
@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_body_the_gateway_cannot_decompress_is_refused_in_the_apis_shape(
    fakes: Fakes, start_gateway: StartGateway, coding: str, body: bytes, status: int, words: str, api: str
) -> None:
    gateway, provider = _gateway(fakes, start_gateway)
    response = _post(gateway, "/chat/completions" if api == "chat" else "/messages", body, coding)
    assert response.status_code == status, response.text
    if api == "chat":
        error = response.json()["error"]
    else:
        shaped = response.json()
        assert shaped["type"] == "error" and response.headers["x-should-retry"] == "false"
        error = shaped["error"]
    assert error["message"].startswith(words)
    assert status == 413 or error["type"] == "invalid_request_error"
    assert provider.app.state.recorded == []


def test_count_tokens_reads_a_compressed_body(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, provider = _gateway(fakes, start_gateway)
    response = _post(gateway, "/messages/count_tokens", gzip.compress(ANTHROPIC), "gzip")
    assert response.status_code == 200, response.text
    assert response.json()["input_tokens"] > 0
