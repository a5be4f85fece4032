"""Keep-alives before a stream's first byte (``gateway.relay.keepalive``), in each API's shape, through the
real SDKs: a slow first token gets keep-alives and then its answer; fallback still works after them; a
request whose every attempt fails ends with an error event the SDK raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
KEEPALIVE_S = 0.1
SLOW = FakeBehavior(ttft_s=0.8, output_tokens=4)
FAST = FakeBehavior(output_tokens=4)
ANSWER = "".join(answer_words(0, 4))
KEEP_ALIVES = {"chat": b": keep-alive\n\n", "responses": b": keep-alive\n\n", "messages": b"event: ping\n"}
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def config(
    api: str,
    *fakes: FakeServer,
    first_token_timeout_s: float = 5.0,
    keepalive_s: float = KEEPALIVE_S,
    upstream: str | None = None,
) -> Any:
    """Deployments on ``fakes`` speaking ``upstream`` (``api`` itself unless said: else reached by translation)."""
    policy = {"first_byte_keepalive_s": keepalive_s, "first_token_timeout_s": first_token_timeout_s}
    options = {f.name: {"apis": [upstream or api]} for f in fakes}
    return gateway_config(list(fakes), policy=policy, provider_options=options)


def body(api: str) -> dict[str, Any]:
    if api == "responses":
        return {"model": "m", "input": "hi", "stream": True}
    return {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], "stream": True}


class ResponseFailed(Exception):
    """A ``response.failed`` event, as the openai SDK parsed it."""


def raw_stream(gateway: Gateway, api: str) -> tuple[int, bytes]:
    with httpx.stream("POST", gateway.base_url + PATHS[api], json=body(api), timeout=10) as response:
        return response.status_code, response.read()


def sdk_answer(gateway: Gateway, api: str) -> str:
    """The streamed answer as the API's own SDK reads it (raises what the SDK raises)."""
    if api == "messages":
        with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as client:
            with client.messages.stream(
                model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                return "".join(stream.text_stream)
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        if api == "responses":
            with client.responses.stream(model="m", input="hi") as responses:
                for event in responses:
                    if event.type == "response.failed":
                        # The SDK parses a failed response as an event, not an exception: raised here.
                        assert event.response.error is not None
                        raise ResponseFailed(event.response.error.message)
                return responses.get_final_response().output_text
        chunks = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_slow_first_token_gets_keep_alives_then_its_answer(
    fakes: Fakes, start_gateway: StartGateway, api: str
) -> None:
    gateway = start_gateway(config(api, fakes.start("a", SLOW)))
    status, raw = raw_stream(gateway, api)
    assert status == 200 and raw.startswith(KEEP_ALIVES[api])
    assert raw.count(KEEP_ALIVES[api]) >= 3  # one per interval over the wait, not one in all
    assert sdk_answer(gateway, api) == ANSWER


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_fallback_after_a_keep_alive_still_answers(fakes: Fakes, start_gateway: StartGateway, api: str) -> None:
    slow, fast = fakes.start("a", SLOW), fakes.start("b", FAST)
    gateway = start_gateway(config(api, slow, fast, first_token_timeout_s=0.4))
    status, raw = raw_stream(gateway, api)
    assert status == 200 and raw.startswith(KEEP_ALIVES[api])
    assert sdk_answer(gateway, api) == ANSWER
    assert slow.app.state.requests == fast.app.state.requests == 2


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_every_attempt_failing_after_a_keep_alive_ends_with_an_error_event(
    fakes: Fakes, start_gateway: StartGateway, api: str
) -> None:
    gateway = start_gateway(config(api, fakes.start("a", SLOW), fakes.start("b", SLOW), first_token_timeout_s=0.3))
    status, raw = raw_stream(gateway, api)
    assert status == 200 and raw.startswith(KEEP_ALIVES[api])
    assert b"no first token within" in raw.rsplit(KEEP_ALIVES[api], 1)[1]
    errors = (openai.APIError, anthropic.APIError, ResponseFailed)
    with pytest.raises(errors, match="no first token within"):
        sdk_answer(gateway, api)


def test_an_upstream_refusal_after_a_keep_alive_is_an_error_event(fakes: Fakes, start_gateway: StartGateway) -> None:
    refusing = FakeBehavior(hang_s=0.4, status=400, error_code="invalid_value")
    gateway = start_gateway(config("chat", fakes.start("a", refusing)))
    status, raw = raw_stream(gateway, "chat")
    assert status == 200 and raw.startswith(b": keep-alive\n\n")
    with pytest.raises(openai.APIError, match="upstream returned 400"):
        sdk_answer(gateway, "chat")


def test_a_quick_answer_gets_no_keep_alive_and_keeps_its_headers(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway = start_gateway(config("chat", fakes.start("a", FAST), keepalive_s=5.0))
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=body("chat"), timeout=10) as response:
        raw = response.read()
    assert b"keep-alive" not in raw and response.headers["x-gateway-provider"] == "a"


def events(raw: bytes) -> list[str]:
    """The stream's named events but keep-alives (Messages' ``ping``), in order."""
    names = [line.removeprefix(b"event: ").decode() for line in raw.split(b"\n") if line.startswith(b"event: ")]
    return [name for name in names if name != "ping"]


TRANSLATED = pytest.mark.parametrize("api", ["responses", "messages"])
"""The agents' APIs, answered by chat-only deployments through translation."""


@TRANSLATED
def test_a_translated_stream_gets_the_clients_keep_alives_then_its_answer(
    fakes: Fakes, start_gateway: StartGateway, api: str
) -> None:
    slow = fakes.start("a", SLOW)
    gateway = start_gateway(config(api, slow, upstream="chat"))
    status, raw = raw_stream(gateway, api)
    assert status == 200 and raw.startswith(KEEP_ALIVES[api]) and raw.count(KEEP_ALIVES[api]) >= 3
    assert events(raw)[0] == ("message_start" if api == "messages" else "response.created")
    assert sdk_answer(gateway, api) == ANSWER
    assert all(r.path.endswith("/chat/completions") for r in slow.app.state.recorded)


@TRANSLATED
def test_fallback_after_a_keep_alive_still_answers_a_translated_stream(
    fakes: Fakes, start_gateway: StartGateway, api: str
) -> None:
    slow, fast = fakes.start("a", SLOW), fakes.start("b", FAST)
    gateway = start_gateway(config(api, slow, fast, first_token_timeout_s=0.4, upstream="chat"))
    status, raw = raw_stream(gateway, api)
    assert status == 200 and raw.startswith(KEEP_ALIVES[api])
    assert sdk_answer(gateway, api) == ANSWER
    assert slow.app.state.requests == fast.app.state.requests == 2


@TRANSLATED
def test_a_translated_stream_failing_after_a_keep_alive_ends_with_the_clients_error_event(
    fakes: Fakes, start_gateway: StartGateway, api: str
) -> None:
    slow = (fakes.start("a", SLOW), fakes.start("b", SLOW))
    gateway = start_gateway(config(api, *slow, first_token_timeout_s=0.3, upstream="chat"))
    status, raw = raw_stream(gateway, api)
    assert status == 200 and raw.startswith(KEEP_ALIVES[api])
    assert b"no first token within" in raw and b"chat.completion" not in raw
    assert events(raw) == (["error"] if api == "messages" else ["response.created", "response.failed"])
    with pytest.raises((anthropic.APIError, ResponseFailed), match="no first token within"):
        sdk_answer(gateway, api)
