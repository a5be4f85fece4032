"""A provider that refuses the gateway's own key inside a 200: an error body, or an error event in its stream.

Some providers and proxies answer a wrong key with 200 and ``{"error": {"code": "invalid_api_key", …}}``, or start
(or break off) a stream with OpenAI's streamed error object or Anthropic's ``event: error`` of type
``authentication_error``. That is the same refusal as a 401 (``test_deployment_credentials_refused``), and is
treated alike: the client gets a 502 in its API's shape naming the deployment, never the provider's code or words
(which quote the key's ends), the deployment's circuit opens at once, and the request falls back when nothing was
sent yet. A refusal after the client had bytes ends the stream with an error event in the client's shape, free of
the provider's code. Real ``openai`` and ``anthropic`` SDK clients; a ``ScriptedUpstream`` answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
SECRET = "sk-upstream-secret-5d1c"
OPENAI_REFUSAL = {
    "message": "Incorrect API key provided: sk-upstr***********5d1c.",
    "type": "invalid_request_error",
    "param": None,
    "code": "invalid_api_key",
}
ANTHROPIC_REFUSAL = {
    "type": "error",
    "error": {"type": "authentication_error", "message": "invalid x-api-key sk-upstr…"},
}
RESPONSES_REFUSAL = {**OPENAI_REFUSAL, "type": "error", "sequence_number": 0}
CHAT_CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "wrong-upstream",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}, "finish_reason": None}],
}
MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "wrong-upstream",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 0},
    },
}
BLOCK_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
BLOCK_DELTA = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}
ASK: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
REFUSED = "deployment 'wrong': the provider refused the gateway's credentials (upstream answered 200 with a 401 error)"
LEAKS = ("invalid_api_key", "authentication_error", "sk-upstr", SECRET)


def scripted(test_servers: list[ServerThread], client: str, *, mid_stream: bool = False) -> ScriptedUpstream:
    """The refusing upstream, answering as ``client``'s API refuses a key inside a 200 (after an answer's start
    when ``mid_stream``)."""
    upstream = ScriptedUpstream("wrong")
    test_servers.append(upstream.server.start())
    if client == "chat":
        upstream.answer_json({"error": {**OPENAI_REFUSAL, "type": "authentication_error"}})
    elif client == "chat-stream":
        started: list[tuple[str | None, Any]] = [(None, CHAT_CHUNK)] if mid_stream else []
        upstream.answer_sse([*started, (None, {"error": OPENAI_REFUSAL}), (None, "[DONE]")])
    elif client == "responses-stream":
        upstream.answer_sse([("error", RESPONSES_REFUSAL)])
    elif client == "messages":
        upstream.answer_json(ANTHROPIC_REFUSAL)
    else:
        started = [("message_start", MESSAGE_START), ("content_block_start", BLOCK_START)]
        said = [*started, ("content_block_delta", BLOCK_DELTA)] if mid_stream else started
        upstream.answer_sse([*said, ("error", ANTHROPIC_REFUSAL)])
    return upstream


def lone(start_gateway: StartGateway, upstream: ScriptedUpstream) -> Gateway:
    """The refusing upstream as the model's only deployment, speaking each API natively, with its own key."""
    config = gateway_config(
        [upstream],
        provider_options={"wrong": {"api_key_env": "WRONG_KEY", "apis": ["chat", "responses", "messages"]}},
        deployments={"wrong": {"model": "wrong-upstream"}},
    )
    return start_gateway(config, environ={"WRONG_KEY": SECRET})


def refused(gateway: Gateway, client: str) -> tuple[int, dict[str, Any]]:
    """The status and error object the client's SDK got for a request refused before any answer."""
    if client.startswith("messages"):
        with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
            with pytest.raises(anthropic.APIStatusError) as caught:
                ask: anthropic.types.MessageParam = {"role": "user", "content": "hi"}
                claude.messages.create(model="m", max_tokens=16, messages=[ask], stream=client == "messages-stream")
        return caught.value.status_code, caught.value.response.json()["error"]
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as sdk:
        with pytest.raises(openai.APIStatusError) as failed:
            if client == "responses-stream":
                sdk.responses.create(model="m", input="hi", stream=True)
            else:
                sdk.chat.completions.create(model="m", messages=ASK, stream=client == "chat-stream")
    return failed.value.status_code, failed.value.response.json()["error"]


@pytest.mark.parametrize("client", ["chat", "chat-stream", "responses-stream", "messages", "messages-stream"])
def test_a_refusal_inside_a_200_is_the_deployments_not_the_clients(
    test_servers: list[ServerThread], start_gateway: StartGateway, client: str
) -> None:
    """The client's error names the deployment; its circuit opens at once: the next request is not sent there."""
    upstream = scripted(test_servers, client)
    gateway = lone(start_gateway, upstream)
    status, error = refused(gateway, client)
    assert status == 502
    assert REFUSED in str(error["message"])
    if client.startswith("messages"):
        assert error["type"] == "api_error"
    else:
        assert (error["type"], error["code"]) == ("upstream_error", "upstream_error")
    shown = json.dumps(error)
    for word in LEAKS:
        assert word not in shown
    again, error = refused(gateway, client)
    assert again == 503 and "wrong: circuit open, retry in " in str(error["message"])
    assert len(upstream.bodies) == 1


def test_the_request_falls_back_and_the_next_goes_elsewhere(
    test_servers: list[ServerThread], start_gateway: StartGateway, fakes: Fakes
) -> None:
    """The refusing deployment is first in config order: its refusal sends this request and every next one on."""
    upstream = scripted(test_servers, "chat-stream")
    good = fakes.start("good")
    gateway = start_gateway(gateway_config([upstream, good]))
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.with_raw_response.create(model="m", messages=ASK, stream=True)
        assert (answer.headers["x-gateway-deployment"], answer.headers["x-gateway-route"]) == ("good", "fallback")
        assert "".join(chunk.choices[0].delta.content or "" for chunk in answer.parse() if chunk.choices)
        for _ in range(3):
            answer = client.chat.completions.with_raw_response.create(model="m", messages=ASK, stream=True)
            assert answer.headers["x-gateway-deployment"] == "good"
            assert answer.headers["x-gateway-route"] != "fallback"
            list(answer.parse())
    assert len(upstream.bodies) == 1


def test_a_chat_stream_refused_mid_answer_ends_without_the_providers_code(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    upstream = scripted(test_servers, "chat-stream", mid_stream=True)
    gateway = lone(start_gateway, upstream)
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as sdk:
        said = []
        with pytest.raises(openai.APIError) as broke:
            for chunk in sdk.chat.completions.create(model="m", messages=ASK, stream=True):
                said.append(chunk.choices[0].delta.content)
    assert said == ["Hello"]
    error = broke.value.body
    assert isinstance(error, dict) and REFUSED in error["message"]
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_error")
    for word in LEAKS:
        assert word not in json.dumps(error)
    again, _ = refused(gateway, "chat")
    assert again == 503 and len(upstream.bodies) == 1


def test_a_messages_stream_refused_mid_answer_ends_without_the_providers_type(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    upstream = scripted(test_servers, "messages-stream", mid_stream=True)
    gateway = lone(start_gateway, upstream)
    said = []
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with pytest.raises(anthropic.APIStatusError) as broke:
            ask: anthropic.types.MessageParam = {"role": "user", "content": "hi"}
            for event in claude.messages.create(model="m", max_tokens=16, messages=[ask], stream=True):
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    said.append(event.delta.text)
    assert said == ["Hello"]
    body = broke.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "api_error"
    assert REFUSED in body["error"]["message"]
    for word in LEAKS:
        assert word not in json.dumps(body)
    again, _ = refused(gateway, "messages")
    assert again == 503 and len(upstream.bodies) == 1


def test_a_refusal_after_the_keep_alives_ends_the_stream_without_the_providers_code(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """The client already has its 200 and keep-alives when the refusal comes (the stream's first event, after a
    wait): the stream ends with the gateway's error event, and the deployment's circuit opens."""
    wrong = fakes.start("wrong", FakeBehavior(ttft_s=0.5, error_event_after=0, error_code="invalid_api_key"))
    gateway = start_gateway(gateway_config([wrong], policy={"first_byte_keepalive_s": 0.05}))
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=ask, timeout=10) as response:
        status, body = response.status_code, response.read()
    assert status == 200 and body.startswith(b": keep-alive\n\n")
    last = json.loads(body.rstrip().rsplit(b"\n\n", 1)[-1].removeprefix(b"data: "))
    assert "deployment 'wrong': the provider refused the gateway's credentials" in last["error"]["message"]
    assert "invalid_api_key" not in body.decode()
    again = httpx.post(gateway.base_url + "/chat/completions", json=ask, timeout=10)
    assert again.status_code == 503 and len([r for r in wrong.app.state.recorded if r.body]) == 1
