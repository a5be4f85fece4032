"""Every malformed request and every failed upstream gets an OpenAI-shaped error with the right status."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.app import AppOptions, create_app
from gateway.fakes import FakeBehavior, FakeProvider
from gateway.samples import SampleLog
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.servers import ServerThread, stop_all
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
MAX_BODY = 4096
CHAT = {"model": "m", "messages": MESSAGES}


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[ServerThread, FakeProvider]]:
    """One gateway for the request-validation tests, which never reach a provider."""
    provider = FakeProvider("a", record=True)
    fake = ServerThread(provider).start()
    config = gateway_config([FakeServer(provider, fake)], extra={"server": {"max_body_bytes": MAX_BODY}})
    gateway = ServerThread(create_app(config, AppOptions(environ={}, sinks=[SampleLog()]))).start()
    yield gateway, provider
    stop_all([gateway, fake])


def assert_openai_error(
    response: httpx.Response, status: int, code: str | None = None, param: str | None = None
) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in response.text
    if code is not None:
        assert body["error"]["code"] == code
    if param is not None:
        assert body["error"]["param"] == param
    message: str = body["error"]["message"]
    return message


def post(gateway: ServerThread, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(gateway.url + path, timeout=10, **kwargs)


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"", "invalid_json"),
        (b"[1, 2]", "invalid_json"),
        (b'"text"', "invalid_json"),
        (b"\xff\xfe{}", "invalid_json"),
        (b'{"model": "m", "messages": [], "temperature": NaN}', "invalid_json"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}', "invalid_json"),
        (b'{"model": "m", "messages": ' + b"[" * 1900 + b"]" * 1900 + b"}", "invalid_json"),
    ],
)
def test_invalid_json_is_400(shared: tuple[ServerThread, FakeProvider], content: bytes, code: str) -> None:
    gateway, _ = shared
    response = post(gateway, "/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert_openai_error(response, 400, code)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": MESSAGES}, "model"),
        ("/v1/chat/completions", {"model": "", "messages": MESSAGES}, "model"),
        ("/v1/chat/completions", {"model": 7, "messages": MESSAGES}, "model"),
        ("/v1/chat/completions", {"model": "m"}, "messages"),
        ("/v1/chat/completions", {"model": "m", "messages": "hi"}, "messages"),
        ("/v1/chat/completions", {"model": "m", "messages": []}, "messages"),
        ("/v1/chat/completions", {**CHAT, "stream": "yes"}, "stream"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": "10"}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": True}, "max_completion_tokens"),
        ("/v1/completions", {"model": "m"}, "prompt"),
        ("/v1/completions", {"model": "m", "prompt": 5}, "prompt"),
        ("/v1/embeddings", {"model": "m"}, "input"),
        ("/v1/embeddings", {"model": "m", "input": {"a": 1}}, "input"),
        ("/v1/embeddings", {"model": "m", "input": "x", "stream": True}, "stream"),
    ],
)
def test_missing_or_mistyped_fields_are_400(
    shared: tuple[ServerThread, FakeProvider], path: str, body: dict[str, Any], param: str
) -> None:
    gateway, provider = shared
    before = provider.state.requests
    assert_openai_error(post(gateway, path, json=body), 400, "invalid_request", param)
    assert provider.state.requests == before


def test_sdk_raises_bad_request(shared: tuple[ServerThread, FakeProvider]) -> None:
    gateway, _ = shared
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gateway.url + "/v1").chat.completions.create(model="m", messages=[])
    assert info.value.status_code == 400
    assert info.value.param == "messages"


def test_unknown_model_is_404_listing_known_ones(shared: tuple[ServerThread, FakeProvider]) -> None:
    gateway, _ = shared
    message = assert_openai_error(
        post(gateway, "/v1/chat/completions", json={**CHAT, "model": "gpt-9"}), 404, "model_not_found", "model"
    )
    assert message == "model 'gpt-9' does not exist (known: m)"
    with pytest.raises(openai.NotFoundError):
        sdk(gateway.url + "/v1").embeddings.create(model="gpt-9", input="x")


def test_body_over_the_limit_is_413_with_content_length(shared: tuple[ServerThread, FakeProvider]) -> None:
    gateway, provider = shared
    before = provider.state.requests
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * MAX_BODY}]}
    message = assert_openai_error(post(gateway, "/v1/chat/completions", json=big), 413, "request_too_large")
    assert f"exceeds the limit of {MAX_BODY} bytes" in message
    assert provider.state.requests == before


def test_body_over_the_limit_is_413_when_chunked(shared: tuple[ServerThread, FakeProvider]) -> None:
    gateway, provider = shared
    before = provider.state.requests

    def pieces() -> Iterator[bytes]:
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(8):
            yield b"x" * 1024
        yield b'"}]}'

    response = post(gateway, "/v1/chat/completions", content=pieces(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert_openai_error(response, 413, "request_too_large")
    assert provider.state.requests == before
    # A chunked body under the limit is served.
    small = post(gateway, "/v1/chat/completions", content=iter([json.dumps(CHAT).encode()]))
    assert small.status_code == 200


def test_unknown_path_is_404_and_wrong_method_is_405(shared: tuple[ServerThread, FakeProvider]) -> None:
    gateway, _ = shared
    assert_openai_error(httpx.get(gateway.url + "/v1/nope"), 404, "not_found")
    assert_openai_error(post(gateway, "/v1/chat/completion", json=CHAT), 404, "not_found")
    wrong = httpx.get(gateway.url + "/v1/chat/completions")
    assert_openai_error(wrong, 405, "method_not_allowed")
    assert wrong.headers["allow"] == "POST"
    assert_openai_error(post(gateway, "/v1/models", json={}), 405, "method_not_allowed")


# --------------------------------------------------------------------------------------------
# No provider could answer: 502 / 503 / 504 / 429, the last upstream's message and status kept.


def no_answer(gateway: Gateway, stream: bool, fake: dict[str, Any] | None = None) -> httpx.Response:
    body = {**CHAT, "stream": stream, "fake": fake or {}}
    return httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize("stream", [False, True])
def test_all_providers_500_is_502_with_last_message(fakes: Fakes, start_gateway: StartGateway, stream: bool) -> None:
    first, second = fakes.start("a", FakeBehavior(status=500)), fakes.start("b", FakeBehavior(status=502))
    gateway = start_gateway(gateway_config([first, second]))
    response = no_answer(gateway, stream)
    message = assert_openai_error(response, 502)
    assert message == "no provider could answer (2 attempts); last error: b: upstream returned 502: fake b: error 502"
    assert response.headers["x-request-id"]
    assert response.headers["x-gateway-attempts"] == "2"
    assert first.app.state.requests == second.app.state.requests == 1


def test_all_providers_503_is_503(fakes: Fakes, start_gateway: StartGateway) -> None:
    first, second = fakes.start("a", FakeBehavior(status=500)), fakes.start("b", FakeBehavior(status=503))
    gateway = start_gateway(gateway_config([first, second]))
    message = assert_openai_error(no_answer(gateway, True), 503, "upstream_unavailable")
    assert message.endswith("last error: b: upstream returned 503: fake b: error 503")
    with pytest.raises(openai.InternalServerError) as info:
        sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == 503


def test_all_providers_time_out_is_504(fakes: Fakes, start_gateway: StartGateway) -> None:
    first, second = fakes.start("a", FakeBehavior(hang_s=30)), fakes.start("b", FakeBehavior(ttft_s=30))
    gateway = start_gateway(gateway_config([first, second], policy={"first_token_timeout_s": 0.2}))
    message = assert_openai_error(no_answer(gateway, True), 504, "upstream_timeout")
    assert message == "no provider could answer (2 attempts); last error: b: no first token within 0.2s"


def test_all_providers_unreachable_is_502(fakes: Fakes, start_gateway: StartGateway) -> None:
    first = fakes.start("a")
    port = first.server.port
    gateway = start_gateway(gateway_config([first]))
    first.server.stop()
    message = assert_openai_error(no_answer(gateway, False), 502, "upstream_unavailable")
    assert f"last error: a: cannot reach upstream (connection to 127.0.0.1:{port} failed" in message


def test_all_providers_rate_limited_is_429_with_retry_after(fakes: Fakes, start_gateway: StartGateway) -> None:
    first = fakes.start("a", FakeBehavior(status=429, retry_after="7"))
    second = fakes.start("b", FakeBehavior(status=429, retry_after="3"))
    gateway = start_gateway(gateway_config([first, second]))
    response = no_answer(gateway, True)
    message = assert_openai_error(response, 429, "upstream_rate_limited")
    assert response.headers["retry-after"] == "3"  # the soonest any provider will take the request
    assert message.endswith("last error: b: upstream returned 429: fake b: error 429")
    with pytest.raises(openai.RateLimitError):
        sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES)


@pytest.mark.parametrize("retry_after", ["inf", "1e400", "nan", "-5"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_retry_after_that_is_no_number_of_seconds_is_ignored_not_a_500(
    fakes: Fakes, start_gateway: StartGateway, retry_after: str, stream: bool
) -> None:
    # float() reads "inf" and "1e400" as infinity, which no wait can be (math.ceil of it raised mid-request).
    limited = fakes.start("a", FakeBehavior(status=429, retry_after=retry_after))
    gateway = start_gateway(gateway_config([limited]))
    response = no_answer(gateway, stream)
    assert_openai_error(response, 429, "upstream_rate_limited")
    assert 1 <= int(response.headers["retry-after"]) <= 300


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "content_filter"), (422, "invalid_value"), (413, None)],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_client_fault_is_relayed_as_is_and_not_retried(
    fakes: Fakes, start_gateway: StartGateway, status: int, code: str | None, stream: bool
) -> None:
    first = fakes.start("a", FakeBehavior(status=status, error_code=code))
    second = fakes.start("b")
    gateway = start_gateway(gateway_config([first, second]))
    response = no_answer(gateway, stream)
    direct = httpx.post(first.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == status
    assert response.content == direct.content  # byte for byte what the provider said
    assert response.headers["x-gateway-provider"] == "a"
    assert response.headers["x-gateway-attempts"] == "1"
    assert second.app.state.requests == 0
    wait_until(lambda: len(gateway.samples.samples) == 1)
    (sample,) = gateway.samples.samples
    assert (sample.outcome, sample.status, sample.provider) == ("client_error", status, "a")
