"""Which stop sequence ended an answer, carried across a translation, whole and streamed.

A Messages client told ``stop_reason: "stop_sequence"`` learns which of its ``stop_sequences`` matched from
``stop_sequence``. A chat provider's ``finish_reason`` is only ``stop``; vLLM and SGLang name the matched stop
string in the choice's ``stop_reason`` (an int there is a stop token's id). The other way, an Anthropic
provider's ``stop_sequence`` is a plain ``stop`` to a chat client and a completed response to a Responses client.
Each test has the real ``anthropic`` or ``openai`` SDK as the client and a ``ScriptedUpstream`` as the deployment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream, scripted_behind_gateway
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
HEAD = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "vllm-up"}
USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
ASK: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Count: 1, 2, 3"}]


def behind_gateway(
    test_servers: list[ServerThread], start_gateway: StartGateway, name: str, api: str
) -> tuple[ScriptedUpstream, str]:
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, name, api)
    return upstream, gateway.url


def vllm_whole(stop_reason: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": "1, 2, 3, 4"}
    choice = {"index": 0, "message": message, "finish_reason": "stop", "stop_reason": stop_reason}
    return {**HEAD, "object": "chat.completion", "choices": [choice], "usage": USAGE}


def vllm_stream(stop_reason: Any) -> list[tuple[str | None, Any]]:
    """As vLLM streams it: the matched stop string in the last choice chunk's ``stop_reason``."""

    def chunk(delta: dict[str, Any], finish: str | None, stop: Any) -> tuple[None, dict[str, Any]]:
        return None, {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "stop_reason": stop}]}

    return [
        chunk({"role": "assistant", "content": ""}, None, None),
        chunk({"content": "1, 2, 3, 4"}, None, None),
        chunk({}, "stop", stop_reason),
        (None, {**HEAD, "choices": [], "usage": USAGE}),
        (None, "[DONE]"),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_providers_matched_stop_string_reaches_a_messages_client(
    test_servers: list[ServerThread], start_gateway: StartGateway, stream: bool
) -> None:
    upstream, url = behind_gateway(test_servers, start_gateway, "vllm", "chat")
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        # A stop token's id (an int) or a stop string the provider added itself is an ordinary end of turn.
        cases = [(", 5", ("stop_sequence", ", 5")), (None, ("end_turn", None)), (128009, ("end_turn", None))]
        for stop_reason, expected in [*cases, ("<|im_end|>", ("end_turn", None))]:
            answer: anthropic.types.Message
            if stream:
                upstream.answer_sse(vllm_stream(stop_reason))
                with client.messages.stream(model="m", max_tokens=64, messages=ASK, stop_sequences=[", 5"]) as s:
                    answer = s.get_final_message()
            else:
                upstream.answer_json(vllm_whole(stop_reason))
                answer = client.messages.create(model="m", max_tokens=64, messages=ASK, stop_sequences=[", 5"])
            assert upstream.last["stop"] == [", 5"]
            assert (answer.stop_reason, answer.stop_sequence) == expected


def claude_stream() -> list[tuple[str | None, Any]]:
    head = {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up", "content": []}
    start = {**head, "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 1}}
    delta = {"stop_reason": "stop_sequence", "stop_sequence": ", 5"}
    return [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "1, 2, 3, 4"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_an_anthropic_stop_sequence_is_a_plain_stop_to_the_openai_apis(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    upstream, url = behind_gateway(test_servers, start_gateway, "claude", "messages")
    whole = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [{"type": "text", "text": "1, 2, 3, 4"}],
        "stop_reason": "stop_sequence",
        "stop_sequence": ", 5",
        "usage": {"input_tokens": 9, "output_tokens": 3},
    }
    chat_ask: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Count: 1, 2, 3"}]
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        upstream.answer_json(whole)
        chat = client.chat.completions.create(model="m", messages=chat_ask, stop=[", 5"])
        assert chat.choices[0].finish_reason == "stop"
        assert upstream.last["stop_sequences"] == [", 5"]
        response = client.responses.create(model="m", input="Count: 1, 2, 3")
        assert (response.status, response.output_text) == ("completed", "1, 2, 3, 4")
        upstream.answer_sse(claude_stream())
        chunks = list(client.chat.completions.create(model="m", messages=chat_ask, stop=[", 5"], stream=True))
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
        with client.responses.stream(model="m", input="Count: 1, 2, 3") as events:
            final = events.get_final_response()
        assert (final.status, final.output_text) == ("completed", "1, 2, 3, 4")
