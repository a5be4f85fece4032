"""SDK clients through the gateway to chat providers whose streams differ from OpenAI's, scripted byte for byte.

Each test scripts one provider's documented or observed shape on a ``ScriptedUpstream`` (the only deployment,
chat only, so that Messages and Responses clients are served by translation) and checks what a real ``openai``
or ``anthropic`` client gets and what the gateway measured. The meter's reading of the same shapes, without HTTP,
is in ``tests/test_stream_shapes.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.samples import Sample
from tests.support.config import gateway_config
from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream, scripted_behind_gateway
from tests.support.servers import ServerThread
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
HEAD = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up"}
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> tuple[None, dict[str, Any]]:
    return None, {**HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}


@pytest.fixture
def upstream(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> Iterator[tuple[ScriptedUpstream, Gateway]]:
    """A scripted chat-only upstream behind a gateway."""
    yield scripted_behind_gateway(test_servers, start_gateway, "up", "chat")


def only_sample(gateway: Gateway) -> Sample:
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    return gateway.samples.samples[0]


def stream_text(gateway: Gateway) -> str:
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_togethers_text_beside_the_delta_is_counted_once(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    """Together repeats each chat chunk's content in the choice's ``text`` (the completions field): one answer."""
    scripted, gateway = upstream

    def together(text: str, finish: str | None = None, usage: dict[str, Any] | None = None) -> tuple[None, Any]:
        delta = {"token_id": 1, "role": "assistant", "content": text, "tool_calls": None}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "seed": None, "delta": delta}
        return None, {**HEAD, "choices": [choice], "usage": usage}

    scripted.answer_sse([together("Hello"), together(" there"), together(" you", "eos", USAGE), (None, "[DONE]")])
    assert stream_text(gateway) == "Hello there you"
    sample = only_sample(gateway)
    assert sample.output_tokens == 3 and sample.usage_completion_tokens == 3


def mistral_cut() -> list[tuple[str | None, Any]]:
    """Mistral ends an answer its model's context cut with ``model_length`` (a limit, as ``length`` is)."""
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hello there"}),
        chunk({"content": ""}, "model_length", usage=USAGE),
        (None, "[DONE]"),
    ]


def test_mistrals_model_length_is_a_limit_to_translated_clients(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    scripted, gateway = upstream
    scripted.answer_sse(mistral_cut())
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            message = stream.get_final_message()
    assert message.stop_reason == "max_tokens" and message.content[0].type == "text"
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with client.responses.stream(model="m", input="hi") as responses:
            events = [event.type for event in responses]
    assert events[-1] == "response.incomplete"


def test_mistrals_model_length_is_judged_as_a_limit(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    """Stopped by a limit well below the request's own: a truncated answer, as with ``length``."""
    scripted, gateway = upstream
    scripted.answer_sse(mistral_cut())
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=64
        )
        finishes: list[str | None] = [c.choices[0].finish_reason for c in stream if c.choices]
    assert finishes[-1] == "model_length"  # relayed as Mistral sent it
    assert only_sample(gateway).validity == "truncated"


def test_groqs_own_usage_reaches_translated_clients(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    """Groq puts usage in ``x_groq.usage`` on its last chunk; without the standard usage chunk it is the usage."""
    scripted, gateway = upstream
    groq_usage = {**USAGE, "queue_time": 0.02, "prompt_time": 0.001, "completion_time": 0.01, "total_time": 0.011}
    scripted.answer_sse(
        [
            chunk({"role": "assistant", "content": ""}, x_groq={"id": "req_1"}),
            chunk({"content": "Hello"}),
            chunk({"content": " there you"}),
            chunk({}, "stop", x_groq={"id": "req_1", "usage": groq_usage}),
            (None, "[DONE]"),
        ]
    )
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            message = stream.get_final_message()
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, 3)
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with client.responses.stream(model="m", input="hi") as responses:
            final = responses.get_final_response()
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (11, 3)


def test_magistrals_thinking_parts_are_its_reasoning_and_its_text_parts_the_answer(
    upstream: tuple[ScriptedUpstream, Gateway],
) -> None:
    """Mistral's reasoning models answer with a list of parts, ``thinking`` then ``text``: the answer is measured
    and judged from the text parts, and a translated client gets the thinking as reasoning."""
    scripted, gateway = upstream
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "Hmm"}]}
    content = [thinking, {"type": "text", "text": "Hello there you"}]
    message = {"role": "assistant", "content": content, "tool_calls": None, "prefix": False}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    scripted.answer_json(
        {"id": "up", "object": "chat.completion", "created": 1, "model": "magistral", "choices": [choice]}
    )
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        relayed = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert relayed.choices[0].message.content == content  # type: ignore[comparison-overlap]  # as Mistral sent it
    sample = only_sample(gateway)
    assert (sample.validity, sample.output_tokens) == ("valid", 3)
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        translated = claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)
    blocks = [(b.type, b.thinking if b.type == "thinking" else b.text) for b in translated.content]  # type: ignore[union-attr]
    assert blocks == [("thinking", "Hmm"), ("text", "Hello there you")]


def test_magistrals_streamed_thinking_parts_reach_a_messages_client(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    scripted, gateway = upstream
    scripted.answer_sse(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Hmm"}]}]}),
            chunk({"content": [{"type": "text", "text": "Hello"}]}),
            chunk({"content": " there you"}),
            chunk({"content": ""}, "stop", usage=USAGE),
            (None, "[DONE]"),
        ]
    )
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            message = stream.get_final_message()
    blocks = [(b.type, b.thinking if b.type == "thinking" else b.text) for b in message.content]  # type: ignore[union-attr]
    assert blocks == [("thinking", "Hmm"), ("text", "Hello there you")]
    sample = only_sample(gateway)
    assert (sample.validity, sample.output_tokens) == ("valid", 3)


def test_tgis_string_error_event_reaches_an_openai_client_with_its_message(
    upstream: tuple[ScriptedUpstream, Gateway],
) -> None:
    """TGI's mid-stream error is ``{"error": "<message>", "error_type": ...}``: the client is told the message in
    OpenAI's error shape, which its SDK reads (a bare string it reports as a nameless streaming error)."""
    scripted, gateway = upstream
    error = {"error": "Request failed during generation: Server error: CUDA out of memory", "error_type": "generation"}
    scripted.answer_sse([chunk({"role": "assistant", "content": "Hello"}, usage=None), (None, error)])
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        with pytest.raises(openai.APIError, match="CUDA out of memory"):
            for _ in stream:
                pass
    assert only_sample(gateway).outcome == "upstream_error"


MISTRAL_EXTRA_FORBIDDEN = {
    "object": "error",
    "message": {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "stream_options", "include_usage"],
                "msg": "Extra inputs are not permitted",
                "input": True,
            }
        ]
    },
    "type": "invalid_request_error",
    "param": None,
    "code": None,
}


def test_a_provider_that_refuses_the_gateways_usage_ask_is_asked_without_it(
    upstream: tuple[ScriptedUpstream, Gateway],
) -> None:
    """Mistral refuses ``stream_options``, which the gateway adds to a stream the client asked no usage of: the
    refusal is the gateway's to handle (sent again without it, and never again), not the client's 422."""
    scripted, gateway = upstream
    scripted.refuse_field("stream_options", 422, MISTRAL_EXTRA_FORBIDDEN)
    scripted.answer_sse(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hello there you"}),
            chunk({"content": ""}, "stop", usage=USAGE),
            (None, "[DONE]"),
        ]
    )
    assert stream_text(gateway) == "Hello there you"
    assert ["stream_options" in body for body in scripted.bodies] == [True, False]
    assert only_sample(gateway).usage_completion_tokens == 3  # its usage comes unasked, on its last chunk
    assert stream_text(gateway) == "Hello there you"
    assert ["stream_options" in body for body in scripted.bodies] == [True, False, False]  # learned
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            assert stream.get_final_text() == "Hello there you"  # translated: not asked either
    assert "stream_options" not in scripted.last


def test_a_clients_own_stream_options_refused_is_the_clients_error(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    scripted, gateway = upstream
    scripted.refuse_field("stream_options", 422, MISTRAL_EXTRA_FORBIDDEN)
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with pytest.raises(openai.UnprocessableEntityError):
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
    assert len(scripted.bodies) == 1


def test_a_finish_reason_that_says_the_provider_failed_is_an_error(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    """Mistral's ``finish_reason: "error"`` (and DeepSeek's ``insufficient_system_resource``) end an answer the
    provider could not finish: relayed as sent on the same API, an error to a translated client, and an upstream
    error in the sample (never a complete answer)."""
    scripted, gateway = upstream
    scripted.answer_sse(
        [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": ""}, "error")]
    )
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        finishes: list[str | None] = [c.choices[0].finish_reason for c in stream if c.choices]
    assert finishes[-1] == "error"
    assert only_sample(gateway).outcome == "upstream_error"
    scripted.answer_sse([chunk({"content": "Hel"}), chunk({}, "insufficient_system_resource"), (None, "[DONE]")])
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with pytest.raises(anthropic.APIStatusError, match="insufficient_system_resource"):
            with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as messages:
                messages.get_final_message()


def ids_in(body: dict[str, Any]) -> list[str]:
    """The tool call ids of a chat body's history: each call's, and each tool message's."""
    ids = [call["id"] for message in body["messages"] for call in message.get("tool_calls") or []]
    return ids + [message["tool_call_id"] for message in body["messages"] if message.get("role") == "tool"]


def mistral_refuses_ids(body: dict[str, Any]) -> bool:
    return any(not (len(i) == 9 and i.isalnum()) for i in ids_in(body))


MISTRAL_BAD_ID = {
    "object": "error",
    "message": "Tool call id was toolu_01A09q90qw90lq917835lq9 but must be a-z, A-Z, 0-9, with a length of 9.",
    "type": "invalid_function_call",
    "param": None,
    "code": "3280",
}


def test_another_providers_tool_call_ids_are_renamed_for_mistral(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    """Mistral refuses tool call ids but nine letters and digits; a conversation whose calls another provider made
    (Claude's ``toolu_...``) is sent again with its ids renamed alike in each call and its result."""
    scripted, gateway = upstream
    scripted.refuse(mistral_refuses_ids, 400, MISTRAL_BAD_ID)
    scripted.answer_sse([chunk({"role": "assistant", "content": "Sunny"}), chunk({}, "stop"), (None, "[DONE]")])
    history: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "sun"}],
        },
    ]
    tools: list[anthropic.types.ToolParam] = [{"name": "weather", "input_schema": {"type": "object"}}]
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with claude.messages.stream(model="m", max_tokens=64, messages=history, tools=tools) as stream:
            assert stream.get_final_text() == "Sunny"
    refused, renamed = (ids_in(body) for body in scripted.bodies)
    assert refused == ["toolu_01A09q90qw90lq917835lq9"] * 2
    assert len(set(renamed)) == 1 and not mistral_refuses_ids(scripted.last)
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        call = {"id": "call_abc123def456", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        messages: list[Any] = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_abc123def456", "content": "sun"},
        ]
        answer = client.chat.completions.create(model="m", stream=True, messages=messages)
        assert "".join(c.choices[0].delta.content or "" for c in answer if c.choices) == "Sunny"
    assert len(scripted.bodies) == 3 and not mistral_refuses_ids(scripted.last)  # learned: renamed at once


def mistral_refuses_unknown(body: dict[str, Any]) -> bool:
    reasoning = any("reasoning_content" in message for message in body["messages"])
    return "user" in body or "stream_options" in body or reasoning


def extra_forbidden(*locs: list[Any]) -> dict[str, Any]:
    """Mistral's 422 for fields it does not know: pydantic's ``extra_forbidden``, one per ``loc``."""
    detail = [{"type": "extra_forbidden", "loc": loc, "msg": "Extra inputs are not permitted"} for loc in locs]
    return {"object": "error", "message": {"detail": detail}, "type": "invalid_request_error", "param": None}


def test_fields_a_translation_wrote_that_mistral_refuses_are_left_out(
    upstream: tuple[ScriptedUpstream, Gateway],
) -> None:
    """A Messages client's request, translated to chat, carries hints Mistral refuses as unknown (Claude Code's user
    id as ``user``, its reasoning as ``reasoning_content``, the usage ask): sent again without them, and learned."""
    scripted, gateway = upstream
    locs: list[list[Any]] = [
        ["body", "user"],
        ["body", "stream_options"],
        ["body", "messages", 1, "assistant", "reasoning_content"],
    ]
    scripted.refuse(mistral_refuses_unknown, 422, extra_forbidden(*locs))
    scripted.answer_sse([chunk({"role": "assistant", "content": "Four"}), chunk({}, "stop"), (None, "[DONE]")])
    history: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Add them", "signature": "c2ln"},
                {"type": "text", "text": "4"},
            ],
        },
        {"role": "user", "content": "Sure?"},
    ]
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        for _ in range(2):
            with claude.messages.stream(
                model="m", max_tokens=64, messages=history, metadata={"user_id": "user_abc_account_def"}
            ) as stream:
                assert stream.get_final_text() == "Four"
    assert [mistral_refuses_unknown(body) for body in scripted.bodies] == [True, False, False]
    assert scripted.last["messages"][1] == {"role": "assistant", "content": "4"}


def test_openai_hints_a_translation_carried_that_mistral_refuses_are_left_out(
    upstream: tuple[ScriptedUpstream, Gateway],
) -> None:
    """A Responses client's processing tier, verbosity and cache retention, carried to chat as the chat API names them,
    are hints a stricter server may not know: refused as unknown, the request goes again without them."""
    scripted, gateway = upstream
    hints = ("service_tier", "verbosity", "prompt_cache_retention")
    scripted.refuse(lambda body: bool(set(hints) & body.keys()), 422, extra_forbidden(*(["body", h] for h in hints)))
    scripted.answer_json(
        {
            **HEAD,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Four"}, "finish_reason": "stop"}],
        }
    )
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        response = client.responses.create(
            model="m", input="2+2?", service_tier="priority", text={"verbosity": "low"}, prompt_cache_retention="24h"
        )
    assert response.output_text == "Four"
    first, again = scripted.bodies
    assert set(hints) <= first.keys() and not set(hints) & again.keys()


def test_a_whole_answer_the_provider_could_not_finish_goes_to_the_next_deployment(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """DeepSeek ends an answer its servers could not finish with ``insufficient_system_resource``: not an answer to
    relay while another deployment may give one."""
    failing, answering = ScriptedUpstream("deepseek"), ScriptedUpstream("other")
    test_servers.extend([failing.server.start(), answering.server.start()])
    gateway = start_gateway(gateway_config([failing, answering]))

    def whole(content: str, finish: str) -> dict[str, Any]:
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        return {
            "id": "up",
            "object": "chat.completion",
            "created": 1,
            "model": "up",
            "choices": [choice],
            "usage": USAGE,
        }

    failing.answer_json(whole("Hel", "insufficient_system_resource"))
    answering.answer_json(whole("Hello there you", "stop"))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hello there you"
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [(s.provider, s.outcome) for s in gateway.samples.samples] == [
        ("deepseek", "upstream_error"),
        ("other", "ok"),
    ]


def test_groqs_tool_use_failed_is_its_models_failure_not_the_requests(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """Groq answers 400 ``invalid_request_error`` with code ``tool_use_failed`` when its model wrote a tool call it
    could not parse: the next deployment is asked, and the failure is Groq's."""
    groq, other = ScriptedUpstream("groq"), ScriptedUpstream("other")
    test_servers.extend([groq.server.start(), other.server.start()])
    gateway = start_gateway(gateway_config([groq, other]))
    failed = {
        "message": "Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details.",
        "type": "invalid_request_error",
        "code": "tool_use_failed",
        "failed_generation": '<function=weather>{"city": "Paris"</function>',
    }
    groq.answer_json({"error": failed}, status=400)
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    choice = {"index": 0, "message": {"role": "assistant", "tool_calls": [call]}, "finish_reason": "tool_calls"}
    other.answer_json({"id": "up", "object": "chat.completion", "created": 1, "model": "up", "choices": [choice]})
    tools: list[Any] = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools
        )
    calls = answer.choices[0].message.tool_calls or []
    assert [c.function.arguments for c in calls if c.type == "function"] == ['{"city": "Paris"}']
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [(s.provider, s.outcome) for s in gateway.samples.samples] == [("groq", "upstream_error"), ("other", "ok")]


TGI_TOO_LONG = {
    "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4500 `inputs` tokens "
    "and 512 `max_new_tokens`",
    "error_type": "validation",
}


def test_tgis_prompt_too_long_moves_to_a_larger_window(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """TGI refuses a prompt too long for it with a 422 whose ``error`` is a bare string: the prompt is too long for
    that deployment only, so the next one is asked, and a client with nowhere else to go is told so by code."""
    tgi, larger = ScriptedUpstream("tgi"), ScriptedUpstream("larger")
    test_servers.extend([tgi.server.start(), larger.server.start()])
    tgi.answer_json(TGI_TOO_LONG, status=422)
    choice = {"index": 0, "message": {"role": "assistant", "content": "Read it all"}, "finish_reason": "stop"}
    larger.answer_json({"id": "up", "object": "chat.completion", "created": 1, "model": "up", "choices": [choice]})
    messages: list[Any] = [{"role": "user", "content": "a long document"}]
    gateway = start_gateway(gateway_config([tgi, larger]))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        assert client.chat.completions.create(model="m", messages=messages).choices[0].message.content == "Read it all"
    alone = start_gateway(gateway_config([tgi]))
    with openai.OpenAI(base_url=alone.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            client.chat.completions.create(model="m", messages=messages)
    assert refused.value.code == "context_length_exceeded" and "must be <= 4096" in refused.value.message


def openrouter_details(*details: dict[str, Any], reasoning: str | None = None) -> tuple[None, dict[str, Any]]:
    """OpenRouter's reasoning delta: ``reasoning_details`` beside ``reasoning`` (null when only the details hold it)."""
    return chunk({"role": "assistant", "content": "", "reasoning": reasoning, "reasoning_details": list(details)})


REASONED = {"type": "reasoning.text", "text": "Weigh it", "format": "anthropic-claude-v1", "index": 0}
SEALED = {"type": "reasoning.encrypted", "data": "gAAAAB-openrouter-only", "id": "rs_1", "format": "openai-v1"}


def said(message: anthropic.types.Message) -> list[tuple[str, str]]:
    """Each content block's type and text (a thinking block's thinking)."""
    return [
        (b.type, b.thinking if b.type == "thinking" else b.text if b.type == "text" else "") for b in message.content
    ]


def test_openrouters_reasoning_details_reach_translated_clients(upstream: tuple[ScriptedUpstream, Gateway]) -> None:
    """OpenRouter streams reasoning as ``reasoning_details``, sometimes with ``reasoning`` null: its text and summary
    kinds are the thinking, once each when ``reasoning`` says the same; its encrypted kind only OpenRouter reads."""
    scripted, gateway = upstream
    stream: list[tuple[str | None, Any]] = [
        openrouter_details(REASONED),
        openrouter_details({**REASONED, "text": " up."}, reasoning=" up."),  # both: the same text, read once
        openrouter_details({"type": "reasoning.summary", "summary": " Done.", "index": 1}, SEALED),
        chunk({"content": "Yes."}),
        chunk({}, "stop", usage=USAGE),
        (None, "[DONE]"),
    ]
    scripted.answer_sse(stream)
    details = [REASONED, SEALED]
    reply = {"role": "assistant", "content": "Yes.", "reasoning": None, "reasoning_details": details}
    whole = {**HEAD, "object": "chat.completion", "usage": USAGE}
    whole["choices"] = [{"index": 0, "message": reply, "logprobs": None, "finish_reason": "stop"}]
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as events:
            assert said(events.get_final_message()) == [("thinking", "Weigh it up. Done."), ("text", "Yes.")]
        scripted.answer_json(whole)
        assert said(claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)) == [
            ("thinking", "Weigh it"),
            ("text", "Yes."),
        ]
    scripted.answer_sse(stream)
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with client.responses.stream(model="m", input="hi") as responses:
            output = responses.get_final_response().output
    thought = [c.text for item in output if item.type == "reasoning" for c in item.content or []]
    assert thought == ["Weigh it up. Done."] and not any(
        item.type == "reasoning" and item.encrypted_content for item in output
    )
