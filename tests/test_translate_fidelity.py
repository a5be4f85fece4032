"""What a translation must not lose: each case has the real ``anthropic`` or ``openai`` SDK as the client and a provider
of another API upstream, and checks what the provider was sent or what the client got against what the client's own
API promises (a tool's failure stays a failure, a cache hint stays harmless, a call keeps its arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.scripted import scripted_behind_gateway
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
TOOLS: list[anthropic.types.ToolParam] = [{"name": "shot", "input_schema": {"type": "object"}}]


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10)


def sent(fakes_recorded: list[Any]) -> dict[str, Any]:
    """The last inference request body a fake was sent."""
    body: dict[str, Any] = fakes_recorded[-1].body
    return body


def test_a_failed_tool_result_with_an_image_stays_a_failure_on_a_responses_provider(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Claude Code's screenshot tool fails with text and a picture: a Responses output has no error flag, so the
    failure must be said in the output's text, as it is for a result of text alone."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": ["responses"]}}))
    image: anthropic.types.ImageBlockParam = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
    }
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "display locked"}, image],
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True, "content": [image]},
            ],
        },
    ]
    with claude(gateway.url) as client:
        client.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=messages)
    outputs = [i["output"] for i in sent(fake.app.state.recorded)["input"] if i.get("type") == "function_call_output"]
    picture = {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}", "detail": "auto"}
    assert outputs == [
        [{"type": "input_text", "text": "Error: display locked"}, picture],
        [{"type": "input_text", "text": "Error:"}, picture],
    ]


@pytest.mark.parametrize("upstream", ["chat", "responses"])
def test_a_top_level_cache_control_is_a_cache_hint_not_a_refusal(
    fakes: Fakes, start_gateway: StartGateway, upstream: str
) -> None:
    """The Messages API's request-wide ``cache_control`` (automatic caching: the last cacheable block is marked) asks
    nothing of the answer; chat and Responses providers cache prefixes without marks, as for a block's own mark."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": [upstream]}}))
    with claude(gateway.url) as client:
        answer = client.messages.create(
            model="m", max_tokens=64, cache_control={"type": "ephemeral"}, messages=[{"role": "user", "content": "hi"}]
        )
    assert answer.stop_reason == "end_turn"
    assert "cache_control" not in sent(fake.app.state.recorded)


def whole_calls() -> list[tuple[str | None, Any]]:
    """A Responses stream whose two function calls come whole in their items (no ``arguments.delta`` events), and
    whose text comes only in its ``output_text.done``: what a server that does not stream them sends."""
    calls = [
        {"id": f"fc_{i}", "type": "function_call", "call_id": f"call_{city}", "name": "shot", "arguments": ""}
        for i, city in enumerate(("paris", "rome"))
    ]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_up", "model": "up", "status": "in_progress"}}
    ]
    for index, call in enumerate(calls):
        whole = {**call, "status": "completed", "arguments": f'{{"city":"{call["call_id"][5:]}"}}'}
        events += [
            {"type": "response.output_item.added", "output_index": index, "item": {**call, "status": "in_progress"}},
            {"type": "response.output_item.done", "output_index": index, "item": whole},
        ]
    usage = {"input_tokens": 9, "output_tokens": 4, "total_tokens": 13}
    events.append({"type": "response.completed", "response": {"id": "resp_up", "status": "completed", "usage": usage}})
    return [(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def test_function_calls_streamed_whole_by_a_responses_provider_keep_their_arguments(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """A call's ``output_item.done`` holds its whole arguments: where no delta gave them, they are given then (the
    client got each call with no arguments at all)."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "only", "responses")
    upstream.answer_sse(whole_calls())
    with claude(gateway.url) as client:
        question: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Paris and Rome?"}]
        with client.messages.stream(model="m", max_tokens=64, tools=TOOLS, messages=question) as stream:
            final = stream.get_final_message()
    assert [(b.id, b.input) for b in final.content if b.type == "tool_use"] == [
        ("call_paris", {"city": "paris"}),
        ("call_rome", {"city": "rome"}),
    ]
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as chat:
        tools: list[openai.types.chat.ChatCompletionToolParam] = [
            {"type": "function", "function": {"name": "shot", "parameters": {"type": "object"}}}
        ]
        with chat.chat.completions.stream(
            model="m", tools=tools, messages=[{"role": "user", "content": "Paris and Rome?"}]
        ) as chunks:
            message = chunks.get_final_completion().choices[0].message
    assert [(c.id, c.function.arguments) for c in message.tool_calls or []] == [
        ("call_paris", '{"city":"paris"}'),
        ("call_rome", '{"city":"rome"}'),
    ]


def test_text_given_only_in_its_done_event_reaches_the_client(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "only", "responses")
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_up", "model": "up", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", **where, "delta": "Hello"},
        {"type": "response.output_text.done", **where, "text": "Hello, world."},
        {"type": "response.completed", "response": {"id": "resp_up", "status": "completed"}},
    ]
    upstream.answer_sse([(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)])
    with claude(gateway.url) as client:
        question: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Hi"}]
        with client.messages.stream(model="m", max_tokens=64, messages=question) as stream:
            final = stream.get_final_message()
    assert [b.text for b in final.content if b.type == "text"] == ["Hello, world."]


@pytest.mark.parametrize("client_api", ["chat", "responses"])
def test_the_effort_above_high_thinks_more_than_high_on_a_messages_provider(
    fakes: Fakes, start_gateway: StartGateway, client_api: str
) -> None:
    """OpenAI's ``xhigh`` is its step above ``high``: as a thinking budget it was read as an unknown effort (medium)."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": ["messages"]}}))
    budgets = []
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        for effort in ("high", "xhigh"):
            if client_api == "chat":
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], reasoning_effort=effort
                )
            else:
                client.responses.create(model="m", input="hi", reasoning={"effort": effort})
            budgets.append(sent(fake.app.state.recorded)["thinking"]["budget_tokens"])
    assert budgets[1] > budgets[0]


def interleaved_calls() -> list[tuple[str | None, Any]]:
    """Two parallel calls as some OpenAI-compatible servers stream them: both begun in one chunk, then their
    arguments' fragments taking turns."""
    head = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def args(index: int, text: str) -> dict[str, Any]:
        return {"index": index, "function": {"arguments": text}}

    begun = [
        {"index": i, "id": f"call_{city}", "type": "function", "function": {"name": "shot", "arguments": ""}}
        for i, city in enumerate(("paris", "rome"))
    ]
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": begun}),
        chunk({"tool_calls": [args(0, '{"city":'), args(1, '{"city":')]}),
        chunk({"tool_calls": [args(0, '"paris"}')]}),
        chunk({"tool_calls": [args(1, '"rome"}')]}),
        chunk({}, "tool_calls"),
        (None, "[DONE]"),
    ]


def test_interleaved_parallel_calls_stream_to_a_messages_client_one_block_at_a_time(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """Every delta of a block comes between its start and its stop (a delta after the stop is lost to a client that
    finishes a tool call at its stop, as Claude Code does), and each call gets its own arguments."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "only", "chat")
    upstream.answer_sse(interleaved_calls())
    with claude(gateway.url) as client:
        question: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Paris and Rome?"}]
        events = list(client.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=question, stream=True))
    blocks: dict[int, list[str]] = {}
    open_block: int | None = None
    for event in events:
        if event.type == "content_block_start":
            assert open_block is None
            open_block = event.index
            blocks[event.index] = []
        elif event.type == "content_block_delta":
            assert event.index == open_block and event.delta.type == "input_json_delta"
            blocks[event.index].append(event.delta.partial_json)
        elif event.type == "content_block_stop":
            assert event.index == open_block
            open_block = None
    assert {i: "".join(parts) for i, parts in blocks.items()} == {0: '{"city":"paris"}', 1: '{"city":"rome"}'}


def test_interleaved_parallel_calls_stream_to_a_responses_client_one_item_at_a_time(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "only", "chat")
    upstream.answer_sse(interleaved_calls())
    tool: Any = {"type": "function", "name": "shot", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        events = list(client.responses.create(model="m", input="Paris and Rome?", tools=[tool], stream=True))
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert done == ['{"city":"paris"}', '{"city":"rome"}']
    finished: set[int] = set()
    for event in events:
        if event.type == "response.function_call_arguments.delta":
            assert event.output_index not in finished
        elif event.type == "response.output_item.done":
            finished.add(event.output_index)


def test_a_temperature_above_the_messages_range_is_refused_naming_it(fakes: Fakes, start_gateway: StartGateway) -> None:
    """OpenAI's APIs take a temperature up to 2, Anthropic's up to 1: the ask is refused before anything is sent, in the
    client's shape, as a field the target cannot carry is (another deployment that takes it would serve it)."""
    claude_only = fakes.start("claude", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([claude_only], provider_options={"claude": {"apis": ["messages"]}}))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], temperature=1.5)
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], temperature=1)
    body: Any = refused.value.body
    assert (body["param"], body["code"]) == ("temperature", "untranslatable_field")
    assert answer.choices[0].finish_reason == "stop"
    assert [(r.body or {}).get("temperature") for r in claude_only.app.state.recorded] == [1]


PDF = "JVBERi0xLjQKJcfsj6IK"
PDF_PARTS: dict[str, dict[str, Any]] = {
    "chat": {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
    "messages": {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        "title": "report.pdf",
    },
    "responses": {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
}
"""One PDF as each API takes it inline in a user turn."""


@pytest.mark.parametrize(
    ("client_api", "upstream"),
    [(c, u) for c in ("chat", "messages", "responses") for u in ("chat", "messages", "responses") if c != u],
)
def test_a_pdf_in_a_user_turn_reaches_a_provider_of_another_api(
    fakes: Fakes, start_gateway: StartGateway, client_api: str, upstream: str
) -> None:
    """Every API takes a PDF's bytes in a user turn (chat's ``file``, Messages' ``document``, Responses'
    ``input_file``): carried as the provider's own part, not refused."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": [upstream]}}))
    ask: Any = "Summarise it."
    if client_api == "messages":
        with claude(gateway.url) as client:
            question: Any = [{"role": "user", "content": [PDF_PARTS["messages"], {"type": "text", "text": ask}]}]
            answer = client.messages.create(model="m", max_tokens=64, messages=question)
            assert answer.stop_reason == "end_turn"
    else:
        with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as chat:
            if client_api == "chat":
                content: Any = [PDF_PARTS["chat"], {"type": "text", "text": ask}]
                completion = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
                assert completion.choices[0].finish_reason == "stop"
            else:
                turns: Any = [
                    {"role": "user", "content": [PDF_PARTS["responses"], {"type": "input_text", "text": ask}]}
                ]
                response = chat.responses.create(model="m", input=turns)
                assert response.status == "completed"
    body = sent(fake.app.state.recorded)
    turn = (body["input"] if upstream == "responses" else body["messages"])[-1]
    assert turn["content"][0] == PDF_PARTS[upstream]


@pytest.mark.parametrize("upstream", ["chat", "responses"])
def test_a_pdf_a_tool_returned_reaches_a_provider_of_another_api(
    fakes: Fakes, start_gateway: StartGateway, upstream: str
) -> None:
    """A file reader's result holding a PDF (a Messages ``tool_result`` with a ``document``): a Responses output
    holds files; a chat tool message holds text only, so the file follows in a user message, as a result's images do."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": [upstream]}}))
    result: Any = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [PDF_PARTS["messages"]]}
    messages: Any = [
        {"role": "user", "content": "Read report.pdf."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}]},
        {"role": "user", "content": [result]},
    ]
    with claude(gateway.url) as client:
        client.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=messages)
    body = sent(fake.app.state.recorded)
    if upstream == "responses":
        outputs = [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
        assert outputs == [[PDF_PARTS["responses"]]]
    else:
        note = "[the files this tool returned follow in the next user message]"
        assert body["messages"][-2:] == [
            {"role": "tool", "tool_call_id": "toolu_1", "content": note},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Files returned by tool call toolu_1:"}, PDF_PARTS["chat"]],
            },
        ]


def test_a_pdf_in_a_function_output_reaches_a_messages_provider(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": ["messages"]}}))
    turns: Any = [
        {"role": "user", "content": "Read report.pdf."},
        {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [PDF_PARTS["responses"]]},
    ]
    tool: Any = {"type": "function", "name": "shot", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        assert client.responses.create(model="m", input=turns, tools=[tool]).status == "completed"
    result = sent(fake.app.state.recorded)["messages"][-1]["content"][0]
    assert result == {"type": "tool_result", "tool_use_id": "call_1", "content": [PDF_PARTS["messages"]]}


def test_a_limit_below_the_responses_least_is_raised_to_it(fakes: Fakes, start_gateway: StartGateway) -> None:
    """Claude Code probes a model with ``max_tokens: 1``; the Responses API refuses a ``max_output_tokens`` below 16
    (a 400 that made the model look unavailable), so the least it takes is asked."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": ["responses"]}}))
    with claude(gateway.url) as client:
        for limit in (1, 16, 17):
            client.messages.create(model="m", max_tokens=limit, messages=[{"role": "user", "content": "quota"}])
    assert [(r.body or {}).get("max_output_tokens") for r in fake.app.state.recorded] == [16, 16, 17]


def test_a_cache_mark_in_a_chat_system_message_reaches_a_messages_provider_where_it_was_put(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """OpenRouter's and LiteLLM's users mark the stable part of a chat system message with ``cache_control`` for an
    Anthropic provider: the mark stays on that part (on the whole text, the part after it, which changes every
    turn, would keep the cache from ever hitting), and a provider without marks gets the text as it was."""
    claude_only = fakes.start("claude", FakeBehavior(output_tokens=3))
    gpt_only = fakes.start("gpt", FakeBehavior(output_tokens=3))
    options = {"claude": {"apis": ["messages"]}, "gpt": {"apis": ["responses"]}}
    system: Any = {
        "role": "system",
        "content": [
            {"type": "text", "text": "Static rules.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": " Today is Monday."},
        ],
    }
    for fake in (claude_only, gpt_only):
        gateway = start_gateway(gateway_config([fake], provider_options={fake.name: options[fake.name]}))
        with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
            client.chat.completions.create(model="m", messages=[system, {"role": "user", "content": "hi"}])
    assert sent(claude_only.app.state.recorded)["system"] == [
        {"type": "text", "text": "Static rules.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": " Today is Monday."},
    ]
    assert sent(gpt_only.app.state.recorded)["instructions"] == "Static rules. Today is Monday."


def test_thinking_given_whole_in_its_block_start_reaches_a_chat_client(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """A Messages block's start may hold its content (a text block's is read so): a thinking block's too."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "only", "messages")
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": "up", "content": [], "usage": {}}
    thinking = {"type": "thinking", "thinking": "Paris is in France.", "signature": "sig"}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": thinking},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "Paris."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    upstream.answer_sse([(e["type"], e) for e in events])
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        chunks = list(
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Where?"}], stream=True)
        )
    deltas: list[Any] = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Paris is in France."
    assert "".join(d.content or "" for d in deltas) == "Paris."


def test_streamed_calls_without_arguments_reach_a_responses_client_with_the_empty_object(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """A chat provider may stream a call of a tool that takes nothing with no arguments at all; the client parses the
    arguments it is given ("" is no JSON), and a whole answer's such call is given ``{}`` already."""
    upstream, gateway = scripted_behind_gateway(test_servers, start_gateway, "only", "chat")
    head = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up"}
    calls = [
        {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": "shot", "arguments": ""}}
        for i in range(2)
    ]
    chunks: list[tuple[str | None, Any]] = [
        (None, {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]})
        for call in calls
    ]
    chunks += [
        (None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        (None, "[DONE]"),
    ]
    upstream.answer_sse(chunks)
    tool: Any = {"type": "function", "name": "shot", "parameters": {"type": "object"}, "strict": False}
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with client.responses.stream(model="m", input="Two shots.", tools=[tool]) as stream:
            final = stream.get_final_response()
    assert [(o.call_id, o.arguments) for o in final.output if o.type == "function_call"] == [
        ("call_0", "{}"),
        ("call_1", "{}"),
    ]
