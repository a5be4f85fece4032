"""aimock (``tests.aimock_server``), a third-party server, behind the gateway: driven with the real SDKs.

aimock speaks chat completions, the Responses API, embeddings and the Messages API in each one's own shapes,
so it stands for a provider declared to speak any of them: natively, or reached by translation from a client
of another API. Its journal says what it was asked, which the gateway's retries are held against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.config import GatewayConfig
from tests.aimock_server import AimockServer
from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
HELLO = "Hello! How can I help you today?"
FIXTURES: list[dict[str, Any]] = [
    {
        "match": {"inputText": "unsupported"},
        "response": {
            "error": {"message": "embeddings are not enabled on this server", "type": "server_error"},
            "status": 501,
        },
    },
    # aimock answers a content filter on the Responses API as a response whose status is "failed".
    {"match": {"userMessage": "refuse"}, "response": {"content": "", "finishReason": "content_filter"}},
    {"match": {"userMessage": "long story"}, "response": {"content": "Once upon a", "finishReason": "length"}},
    {"match": {"userMessage": "hello"}, "response": {"content": HELLO}},
    {"match": {"endpoint": "chat"}, "response": {"content": "fallback answer"}},
]


@pytest.fixture(scope="module")
def aimock() -> Iterator[AimockServer]:
    with AimockServer(FIXTURES) as server:
        yield server


@pytest.fixture
def mock(aimock: AimockServer) -> AimockServer:
    aimock.forget()
    return aimock


def config_for(server: AimockServer, apis: list[str]) -> GatewayConfig:
    """Model ``m`` on aimock, declared to speak ``apis`` (the others reach it translated)."""
    return gateway_config([server], provider_options={server.name: {"apis": apis}})


def test_a_501_is_not_asked_again(mock: AimockServer, start_gateway: StartGateway) -> None:
    """A server that does not implement an endpoint (501: llama.cpp's embeddings when started without them)
    answers the same when asked again: the lone deployment is asked once, and its words reach the client."""
    gateway = start_gateway(config_for(mock, ["chat", "embeddings"]))
    with pytest.raises(openai.APIStatusError) as caught, sdk(gateway.base_url) as client:
        client.embeddings.create(model="m", input="unsupported")
    assert "embeddings are not enabled on this server" in caught.value.message
    assert len(mock.requests("/v1/embeddings")) == 1


def test_a_messages_client_refused_names_its_own_field(mock: AimockServer, start_gateway: StartGateway) -> None:
    """A Messages client's ``stop_sequences`` cannot reach a Responses-only server: the refusal names the field
    the client sent, not the Chat Completions name it is held under, and nothing is sent."""
    gateway = start_gateway(config_for(mock, ["responses"]))
    with (
        pytest.raises(anthropic.BadRequestError) as caught,
        anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as client,
    ):
        client.messages.create(
            model="m", max_tokens=16, stop_sequences=["help"], messages=[{"role": "user", "content": "hello"}]
        )
    assert "'stop_sequences' cannot be translated to the Responses API" in caught.value.message
    assert mock.requests() == []


def test_a_failed_response_is_no_answer_to_a_chat_client(mock: AimockServer, start_gateway: StartGateway) -> None:
    """A Responses server's answer whose status is ``failed`` reaches a chat client as the failure it is (a 502,
    or the stream's error), never as a finished answer (``finish_reason: stop``, the output so far)."""
    gateway = start_gateway(config_for(mock, ["responses"]))
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "refuse"}]
    with sdk(gateway.base_url) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=messages)
        assert caught.value.status_code == 502 and "the response failed" in caught.value.message
        finishes: list[str | None] = []
        with pytest.raises(openai.APIError, match="the response failed"):
            for chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
                finishes.extend(c.finish_reason for c in chunk.choices)
    assert finishes == [None]
    assert len(mock.requests("/v1/responses")) == 2


def test_a_cut_answer_is_an_incomplete_message_to_a_responses_client(
    mock: AimockServer, start_gateway: StartGateway
) -> None:
    """A chat server's answer cut by its token limit (``finish_reason: length``) reaches a Responses client as an
    incomplete response whose message is incomplete too (OpenAI's own shape), streamed and whole."""
    gateway = start_gateway(config_for(mock, ["chat"]))
    with sdk(gateway.base_url) as client:
        whole = client.responses.create(model="m", input="long story", max_output_tokens=3)
        events = list(client.responses.create(model="m", input="long story", max_output_tokens=3, stream=True))
    assert whole.status == "incomplete" and whole.incomplete_details is not None
    assert [(o.type, o.status) for o in whole.output if o.type == "message"] == [("message", "incomplete")]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.status) for i in done if i.type == "message"] == [("message", "incomplete")]
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.output_text == "Once upon a"
    assert [o.status for o in last.response.output if o.type == "message"] == ["incomplete"]
