"""All six directed pairs end to end: each client SDK, streamed and whole, against a fake that speaks only the
other API, gets the answer's text, its stop reason and its usage."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
PAIRS = [(c, u) for c in ("chat", "messages", "responses") for u in ("chat", "messages", "responses") if c != u]


def ask(client_api: str, url: str, stream: bool) -> tuple[str, str, int]:
    """(text, stop, output tokens) of one answer, as the client's SDK reads it."""
    if client_api == "messages":
        with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
            messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
            message: anthropic.types.Message
            if stream:
                with client.messages.stream(model="m", max_tokens=64, messages=messages) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(model="m", max_tokens=64, messages=messages)
        text = "".join(b.text for b in message.content if b.type == "text")
        return text, str(message.stop_reason), message.usage.output_tokens
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        if client_api == "responses":
            response: openai.types.responses.Response
            if stream:
                with client.responses.stream(model="m", input="hi", max_output_tokens=64) as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(model="m", input="hi", max_output_tokens=64)
            assert response.usage is not None
            return response.output_text, response.status or "", response.usage.output_tokens
        chat_messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model="m", messages=chat_messages, stream=True, stream_options={"include_usage": True}
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
            usage = chunks[-1].usage
        else:
            completion = client.chat.completions.create(model="m", messages=chat_messages)
            text, finish, usage = (
                completion.choices[0].message.content or "",
                completion.choices[0].finish_reason,
                completion.usage,
            )
        assert usage is not None
        return text, finish, usage.completion_tokens


@pytest.mark.parametrize(("client_api", "upstream"), PAIRS)
def test_every_pair_streamed_and_whole(
    fakes: Fakes, start_gateway: StartGateway, client_api: str, upstream: str
) -> None:
    fake = fakes.start("only", FakeBehavior(output_tokens=5), record=True)
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": [upstream]}}))
    stop = {"chat": "stop", "messages": "end_turn", "responses": "completed"}[client_api]
    expected = ("".join(answer_words(0, 5)), stop, 5)
    assert ask(client_api, gateway.url, stream=True) == expected
    assert ask(client_api, gateway.url, stream=False) == expected
    paths = {r.path for r in fake.app.state.recorded}
    assert paths == {
        {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}[upstream]
    }
