"""``service_tier`` across the APIs, driven by the real SDKs through the gateway to the fake, whole and streamed.

Chat Completions and Responses share OpenAI's tiers: one asked in either reaches a deployment of the other as it is,
and the tier the answer was served at comes back in the client's own field. The Messages API's tiers are its own:
``auto`` and ``default``/``standard_only`` map, the rest is left out with no error (``gateway.translate.tiers``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.translate import translate_reply
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
HI: Any = [{"role": "user", "content": "hi"}]


def deployment(fakes: Fakes, start_gateway: StartGateway, api: str) -> tuple[Gateway, FakeServer]:
    fake = fakes.start("a", FakeBehavior(output_tokens=3), record=True)
    return start_gateway(gateway_config([fake], provider_options={"a": {"apis": [api]}})), fake


def sent_tier(fake: FakeServer) -> Any:
    body = fake.app.state.recorded[-1].body
    assert body is not None
    return body.get("service_tier", "absent")


@pytest.mark.parametrize("upstream", ["responses", "messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_client_s_tier_is_carried_and_its_answer_says_the_tier_served(
    fakes: Fakes, start_gateway: StartGateway, upstream: str, stream: bool
) -> None:
    gateway, fake = deployment(fakes, start_gateway, upstream)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10)
    asked: Any = "flex" if upstream == "responses" else "default"
    told = asked
    if stream:
        chunks = list(client.chat.completions.create(model="m", messages=HI, service_tier=asked, stream=True))
        served = {chunk.service_tier for chunk in chunks}
        assert served == {told}, served  # every chunk says it, as OpenAI's do (the tier is known from the start)
    else:
        answer = client.chat.completions.create(model="m", messages=HI, service_tier=asked)
        assert answer.service_tier == told
    assert sent_tier(fake) == ("flex" if upstream == "responses" else "standard_only")
    # A tier the Messages API has no name for is left out there, with no error; a Responses deployment gets it.
    client.chat.completions.create(model="m", messages=HI, service_tier="priority")
    client.close()
    assert sent_tier(fake) == ("priority" if upstream == "responses" else "absent")


@pytest.mark.parametrize("upstream", ["chat", "messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_client_s_tier_is_carried_and_its_answer_says_the_tier_served(
    fakes: Fakes, start_gateway: StartGateway, upstream: str, stream: bool
) -> None:
    gateway, fake = deployment(fakes, start_gateway, upstream)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10)
    asked: Any = "priority" if upstream == "chat" else "auto"
    response: Any
    if stream:
        with client.responses.stream(model="m", input="hi", service_tier=asked) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="m", input="hi", service_tier=asked)
    client.close()
    assert sent_tier(fake) == asked
    # The fake serves what was asked: OpenAI's ``auto`` as ``default``, Anthropic's as ``standard`` (OpenAI's default).
    assert response.service_tier == ("priority" if upstream == "chat" else "default")


@pytest.mark.parametrize("upstream", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_client_s_tier_maps_and_its_usage_says_the_tier_served(
    fakes: Fakes, start_gateway: StartGateway, upstream: str, stream: bool
) -> None:
    gateway, fake = deployment(fakes, start_gateway, upstream)
    client = anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10)
    message: Any
    if stream:
        with client.messages.stream(model="m", max_tokens=16, messages=HI, service_tier="standard_only") as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(model="m", max_tokens=16, messages=HI, service_tier="standard_only")
    client.close()
    assert sent_tier(fake) == "default"
    assert message.usage.service_tier == "standard"


def test_a_tier_no_api_names_is_not_made_up() -> None:
    # An answer's tier the client's API has no name for (Anthropic's ``batch``) is left out, not guessed at.
    answer = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "up",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1, "service_tier": "batch"},
    }
    body, readable = translate_reply(json.dumps(answer).encode(), "messages", "chat", {"messages": HI}, "m")
    assert readable and "service_tier" not in json.loads(body)
