"""SDK clients served by translation from a Messages provider (Claude), scripted byte for byte.

What Anthropic's API asks and answers that a translation must meet: thinking counts against ``max_tokens``,
structured output is ``output_config.format``, a call without arguments streams none, extended thinking is
refused on a tool loop whose calling turn has no signed thinking, and every thinking block's signature is
checked. Each test has the real ``anthropic`` or ``openai`` SDK as the client and a ``ScriptedUpstream`` speaking
Messages as the only deployment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pydantic
import pytest

from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream, scripted_behind_gateway
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
TOOLS: list[anthropic.types.ToolParam] = [{"name": "weather", "input_schema": {"type": "object"}}]


@pytest.fixture
def messages_only(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> Iterator[tuple[ScriptedUpstream, str]]:
    """A scripted Messages-only upstream behind a gateway: (the upstream, the gateway's URL)."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "claude", "messages")
    yield upstream, gateway.url


def claude_message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    usage = {"input_tokens": 12, "output_tokens": 30}
    head = {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up"}
    return {**head, "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}


def test_reasoning_without_a_limit_leaves_the_answer_its_room(messages_only: tuple[ScriptedUpstream, str]) -> None:
    """Thinking counts against Anthropic's ``max_tokens``: a client that set no limit (OpenAI's APIs need none)
    must not have its answer squeezed into what the thinking budget leaves of the default."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "4"}]))
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+2?"}], reasoning_effort="high"
        )
        chat = upstream.last
        client.responses.create(model="m", input="2+2?", reasoning={"effort": "medium"})
        responses = upstream.last
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}], max_tokens=3000)
        limited = upstream.last
    for sent, budget in ((chat, 24576), (responses, 8192)):
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert sent["max_tokens"] - budget == 4096  # the default answer's room, beside the thinking
    assert limited["max_tokens"] == 3000 and "thinking" not in limited  # the client's own limit, untouched


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_a_parsed_chat_completion_asks_claude_with_the_ga_structured_output_field(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """Anthropic's structured outputs are ``output_config.format`` since they left beta; the beta's top-level
    ``output_format`` is refused without its beta header (which the gateway does not send)."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": '{"name": "Ana", "age": 31}'}]))
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.parse(
            model="m", messages=[{"role": "user", "content": "Ana, 31"}], response_format=Person
        )
    assert answer.choices[0].message.parsed == Person(name="Ana", age=31)
    sent = upstream.last
    assert "output_format" not in sent
    assert sent["output_config"]["format"]["type"] == "json_schema"
    assert sent["output_config"]["format"]["schema"]["required"] == ["name", "age"]


def test_fields_that_ask_nothing_are_not_refused(messages_only: tuple[ScriptedUpstream, str]) -> None:
    """Some OpenAI clients (LangChain.js's among them) send the API's defaults on every call, and typed ones send unset
    fields as null: none of them asks anything another API cannot give, so none makes the request untranslatable."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "hi"}]))
    defaults: dict[str, Any] = {
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "logprobs": False,
        "logit_bias": {},
        "n": 1,
        "seed": None,
        "top_logprobs": None,
        "service_tier": "auto",
        "modalities": ["text"],
    }
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_body=defaults
        )
        assert answer.choices[0].message.content == "hi"
        assert upstream.last.keys() == {"model", "max_tokens", "messages", "service_tier"}
        assert upstream.last["service_tier"] == "auto"  # OpenAI's tier ``auto`` is Anthropic's too (``tiers``)
        # A value that does ask something is still refused, naming it.
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_body={"presence_penalty": 0.5}
            )
    assert refused.value.body["param"] == "presence_penalty"  # type: ignore[index]
    assert refused.value.body["code"] == "untranslatable_field"  # type: ignore[index]


def test_an_openai_service_tier_is_read_as_absent_by_claude(messages_only: tuple[ScriptedUpstream, str]) -> None:
    """OpenAI's processing tiers (Codex's fast mode asks ``priority``) say how OpenAI serves a model, not what it
    answers, and Anthropic has tiers of its own: a Messages deployment serves the request at its own. A tier no API
    documents may ask something else: refused."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "hi"}]))
    hi: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        client.chat.completions.create(model="m", messages=hi, service_tier="priority")
        assert "service_tier" not in upstream.last
        client.responses.create(model="m", input="hi", service_tier="flex")
        assert "service_tier" not in upstream.last
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="m", input="hi", extra_body={"service_tier": "turbo"})
    assert refused.value.body["param"] == "service_tier"  # type: ignore[index]
    assert len(upstream.bodies) == 2


def claude_stream(*blocks: tuple[dict[str, Any], list[dict[str, Any]]], stop: str) -> list[tuple[str | None, Any]]:
    """A Messages stream as Anthropic sends it: each ``(content block, its deltas)`` in turn."""

    def event(name: str, **data: Any) -> tuple[str, dict[str, Any]]:
        return name, {"type": name, **data}

    out = [event("message_start", message={**claude_message([]), "stop_reason": None})]
    for index, (block, deltas) in enumerate(blocks):
        out.append(event("content_block_start", index=index, content_block=block))
        out += [event("content_block_delta", index=index, delta=d) for d in deltas]
        out.append(event("content_block_stop", index=index))
    out.append(event("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 9}))
    return [*out, event("message_stop")]


def test_a_streamed_call_without_arguments_reaches_openai_clients_as_an_empty_object(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """Anthropic streams a call without arguments as a ``tool_use`` block whose only delta (if any) is empty; an
    OpenAI client parses the arguments it gets (Codex, and the SDK's own ``parse`` helpers), and "" is no JSON."""
    upstream, url = messages_only
    no_args = {"type": "tool_use", "id": "toolu_now", "name": "clock", "input": {}}
    with_args = {"type": "tool_use", "id": "toolu_tz", "name": "clock", "input": {}}
    upstream.answer_sse(
        claude_stream(
            (no_args, [{"type": "input_json_delta", "partial_json": ""}]),
            (with_args, [{"type": "input_json_delta", "partial_json": '{"tz": "UTC"}'}]),
            stop="tool_use",
        )
    )
    chat_tool: Any = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}
    responses_tool: Any = {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        with client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "time?"}], tools=[chat_tool]
        ) as chat:
            completion = chat.get_final_completion()
        with client.responses.stream(model="m", input="time?", tools=[responses_tool]) as responses:
            response = responses.get_final_response()
    calls = completion.choices[0].message.tool_calls or []
    assert [(c.id, c.function.arguments) for c in calls] == [("toolu_now", "{}"), ("toolu_tz", '{"tz": "UTC"}')]
    items = [(o.call_id, o.arguments) for o in response.output if o.type == "function_call"]
    assert items == [("toolu_now", "{}"), ("toolu_tz", '{"tz": "UTC"}')]


def test_a_tool_loop_continued_by_an_openai_client_asks_claude_no_extended_thinking(
    messages_only: tuple[ScriptedUpstream, str],
) -> None:
    """Anthropic refuses extended thinking on a request that answers tool results unless the calling turn starts
    with its signed thinking block, which an OpenAI client cannot send back (it got the reasoning as text): Codex,
    which asks reasoning on every call, would get a 400 on the second request of every tool loop."""
    upstream, url = messages_only
    thinking = {"type": "thinking", "thinking": "The clock tool.", "signature": "c2lnbmVk"}
    call = {"type": "tool_use", "id": "toolu_now", "name": "clock", "input": {}}
    upstream.answer_json(claude_message([thinking, call], stop="tool_use"))
    tool: Any = {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        first = client.responses.create(model="m", input="time?", tools=[tool], reasoning={"effort": "low"})
        assert upstream.last["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        history: list[Any] = [{"role": "user", "content": "time?"}]
        history += [item.model_dump(exclude_none=True) for item in first.output]
        history.append({"type": "function_call_output", "call_id": "toolu_now", "output": "12:00"})
        upstream.answer_json(claude_message([{"type": "text", "text": "Noon."}]))
        client.responses.create(model="m", input=history, tools=[tool], reasoning={"effort": "low"})
        answering = upstream.last
        # Text beside the tool results still answers them; once the model has answered, a new turn thinks again.
        beside = [*history, {"role": "user", "content": "be brief"}]
        client.responses.create(model="m", input=beside, tools=[tool], reasoning={"effort": "low"})
        answering_beside = upstream.last
        history += [{"role": "assistant", "content": "Noon."}, {"role": "user", "content": "and now?"}]
        client.responses.create(model="m", input=history, tools=[tool], reasoning={"effort": "low"})
        next_turn = upstream.last
    assert [b["type"] for b in answering["messages"][1]["content"]] == ["tool_use"]  # no signature to send back
    assert answering["thinking"] == answering_beside["thinking"] == {"type": "disabled"}
    assert next_turn["thinking"] == {"type": "enabled", "budget_tokens": 2048}


@pytest.mark.parametrize("thinking", [{"type": "enabled", "budget_tokens": 2048}, {"type": "adaptive"}])
def test_reasoning_another_api_gave_a_messages_client_never_reaches_claude(
    messages_only: tuple[ScriptedUpstream, str], thinking: Any
) -> None:
    """A Messages client got a chat provider's reasoning as ``thinking`` blocks with an empty signature; when its
    conversation goes on at a Messages provider (a fallback, a session moved), Anthropic would refuse the request
    for them ("Invalid `signature` in `thinking` block"), and for extended thinking on a tool loop whose calling
    turn then has none (adaptive thinking, which Claude Code asks of newer models, as extended)."""
    upstream, url = messages_only
    upstream.answer_json(claude_message([{"type": "text", "text": "Noon, sunny."}]))
    unsigned = {"type": "thinking", "thinking": "Ask the clock.", "signature": ""}
    signed = {"type": "thinking", "thinking": "Then the weather.", "signature": "c2lnbmVk"}
    messages: list[Any] = [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": [unsigned, {"type": "text", "text": "Noon."}]},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [signed, {"type": "tool_use", "id": "toolu_w", "name": "weather", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w", "content": "sunny"}]},
    ]
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as client:
        client.messages.create(model="m", max_tokens=4096, messages=messages, thinking=thinking, tools=TOOLS)
        past = upstream.last
        messages[3]["content"][0] = unsigned  # the tool loop itself began at a chat provider
        client.messages.create(model="m", max_tokens=4096, messages=messages, thinking=thinking, tools=TOOLS)
        loop = upstream.last
    assert past["messages"][1]["content"] == [{"type": "text", "text": "Noon."}]
    assert past["messages"][3]["content"][0] == signed and past["thinking"] == thinking  # signed blocks stay
    assert [b["type"] for b in loop["messages"][3]["content"]] == ["tool_use"]
    assert loop["thinking"] == {"type": "disabled"}


def test_a_forced_tool_call_asks_claude_no_thinking(messages_only: tuple[ScriptedUpstream, str]) -> None:
    """Anthropic takes thinking only beside ``tool_choice`` auto or none: an OpenAI client's ``required`` or named
    tool, with reasoning asked, goes without thinking rather than to a 400."""
    upstream, url = messages_only
    call = {"type": "tool_use", "id": "toolu_now", "name": "clock", "input": {}}
    upstream.answer_json(claude_message([call], stop="tool_use"))
    tool: Any = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}
    named: Any = {"type": "function", "function": {"name": "clock"}}
    sent = []
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        for choice in ("required", named, "auto"):
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "time?"}],
                tools=[tool],
                tool_choice=choice,
                reasoning_effort="low",
            )
            sent.append((upstream.last["tool_choice"]["type"], upstream.last["thinking"]["type"]))
    assert sent == [("any", "disabled"), ("tool", "disabled"), ("auto", "enabled")]
