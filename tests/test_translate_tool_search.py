"""A Responses ``tool_search`` the client runs (Codex's, for its GPT-5 models) through a chat or Messages deployment.

The tool goes out as a function, the model's call of it comes back to the client as the ``tool_search_call`` it
offered (whole and streamed, read by the openai SDK's own types), and in the next turn the search and its output go
back as that function's call and result, the tools it loaded joining the request's own so that the model can call
them; a call of one comes back as the client offered it. A tool search OpenAI runs is refused, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall, ResponseToolSearchCall

from gateway.fakes import FakeBehavior
from gateway.translate import translate_reply, translate_request
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.translation import chat_chunks_as_responses_events

StartGateway = Callable[..., Gateway]
SHELL = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Searches over deferred tools.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
EVENTS = {
    "type": "function",
    "name": "list_events",
    "description": "List the calendar's events.",
    "strict": False,
    "defer_loading": True,
    "parameters": {"type": "object", "properties": {"day": {"type": "string"}}},
}
CALENDAR = {"type": "namespace", "name": "calendar", "description": "The user's calendar.", "tools": [EVENTS]}
FLAT = "calendar__list_events"


def searched(call_id: str = "call_s") -> list[dict[str, Any]]:
    """A history in which the model searched and the client loaded the calendar's tools, as Codex sends it back."""
    return [
        {"role": "user", "content": "what is on today?"},
        {
            "type": "tool_search_call",
            "id": "ts_1",
            "call_id": call_id,
            "status": "completed",
            "execution": "client",
            "arguments": {"query": "calendar", "limit": 4},
        },
        {
            "type": "tool_search_output",
            "id": "tso_1",
            "call_id": call_id,
            "status": "completed",
            "execution": "client",
            "tools": [CALENDAR],
        },
    ]


def searcher(fakes: Fakes, start_gateway: StartGateway, api: str) -> tuple[openai.OpenAI, FakeServer]:
    fake = fakes.start("a", FakeBehavior(agent=True, agent_search="calendar"), record=True)
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": [api]}}))
    return openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10), fake


@pytest.mark.parametrize("api", ["chat", "messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_model_searches_and_the_client_gets_its_tool_search_call(
    fakes: Fakes, start_gateway: StartGateway, api: str, stream: bool
) -> None:
    client, fake = searcher(fakes, start_gateway, api)
    tools: Any = [SHELL, SEARCH]
    response: Any
    if stream:
        with client.responses.stream(model="m", input="what is on today?", tools=tools) as events:
            kinds = [event.type for event in events]
            response = events.get_final_response()
        assert "response.function_call_arguments.delta" not in kinds  # a search's arguments come in its item
    else:
        response = client.responses.create(model="m", input="what is on today?", tools=tools)
    (item,) = response.output
    assert isinstance(item, ResponseToolSearchCall)  # the SDK's own type of the item
    assert (item.execution, item.arguments, item.status) == ("client", {"query": "calendar"}, "completed")
    (sent,) = [r.body for r in fake.app.state.recorded]
    assert sent is not None
    names = [t.get("function", t)["name"] for t in sent["tools"]]
    assert names == ["exec_command", "tool_search"]
    # The next turn: the search and its output go back as the function's call and result; the loaded tools join.
    question, _, output = searched(item.call_id or "")
    client.responses.create(model="m", input=[question, item.model_dump(), output], tools=tools)  # type: ignore[list-item]
    client.close()
    again = fake.app.state.recorded[1].body
    assert again is not None
    assert [t.get("function", t)["name"] for t in again["tools"]] == ["exec_command", "tool_search", FLAT]
    assert "Tools loaded, now callable: calendar__list_events" in json.dumps(again)


def test_history_goes_out_the_same_every_turn_and_a_loaded_tool_is_called_as_offered() -> None:
    request = {"model": "m", "input": searched(), "tools": [SHELL, SEARCH], "store": False}
    sent = translate_request(request, "responses", "chat", "up")
    assistant, result = sent["messages"][1:3]
    call = {"name": "tool_search", "arguments": '{"query":"calendar","limit":4}'}
    assert assistant["tool_calls"] == [{"id": "call_s", "type": "function", "function": call}]
    assert result == {"role": "tool", "tool_call_id": "call_s", "content": f"Tools loaded, now callable: {FLAT}"}
    loaded = sent["tools"][-1]["function"]
    assert loaded["name"] == FLAT and loaded["description"] == "The user's calendar.\n\nList the calendar's events."
    longer = {**request, "input": [*searched(), {"role": "user", "content": "and tomorrow?"}]}
    assert translate_request(longer, "responses", "chat", "up")["tools"] == sent["tools"]
    messages = translate_request(request, "responses", "messages", "up")
    assert [t["name"] for t in messages["tools"]] == ["exec_command", "tool_search", FLAT]
    assert messages["messages"][1]["content"][0]["input"] == {"query": "calendar", "limit": 4}
    # The model calls the loaded function: it comes back as the namespaced call the client's search offered.
    tool_call = {"id": "call_e", "type": "function", "function": {"name": FLAT, "arguments": '{"day":"today"}'}}
    answer = {
        "id": "c",
        "object": "chat.completion",
        "model": "up",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "tool_calls": [tool_call]}, "finish_reason": "tool_calls"}
        ],
    }
    body, readable = translate_reply(json.dumps(answer).encode(), "chat", "responses", request, "m")
    (output,) = json.loads(body)["output"]
    item = ResponseFunctionToolCall.model_validate(output)
    assert readable and (item.name, item.namespace, item.arguments) == ("list_events", "calendar", '{"day":"today"}')


def test_a_streamed_search_with_arguments_that_are_no_object_is_passed_on_as_written() -> None:
    # The client answers a malformed search as it would natively; the gateway invents no query.
    request = {"model": "m", "input": "hi", "tools": [SEARCH], "stream": True}
    start = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "tool_search", "arguments": ""}}
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [start]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{oops"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    events = chat_chunks_as_responses_events(request, chunks)
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    done = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    assert added["type"] == done["type"] == "tool_search_call"
    assert ResponseToolSearchCall.model_validate(done).arguments == "{oops"


@pytest.mark.parametrize(
    ("tools", "input_items", "field", "named"),
    [
        ([SHELL, {"type": "tool_search"}], "hi", "tools[1].type", "'tool_search' run by OpenAI"),
        ([SHELL, {**SEARCH, "execution": "server"}], "hi", "tools[1].type", "'tool_search' run by OpenAI"),
        ([SHELL, {"type": "web_search"}], "hi", "tools[1].type", "the built-in tool 'web_search'"),
        ([SHELL, SEARCH], [{**searched()[1], "execution": "server"}], "input[0].execution", "run by OpenAI"),
    ],
)
def test_a_search_openai_runs_is_refused_naming_it(
    fakes: Fakes, start_gateway: StartGateway, tools: list[Any], input_items: Any, field: str, named: str
) -> None:
    client, fake = searcher(fakes, start_gateway, "chat")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", input=input_items, tools=tools)
    client.close()
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == field and error["code"] == "untranslatable_field"
    assert named in error["message"] and "Chat Completions" in error["message"]
    assert not fake.app.state.recorded


@pytest.mark.parametrize("name", [{"a": 1}, ["a"], 7])
def test_a_function_named_by_no_string_is_refused_naming_it_not_a_500(
    fakes: Fakes, start_gateway: StartGateway, name: Any
) -> None:
    """The names the flattened ones must not clash with are read before each tool is: a malformed name (unhashable,
    as a fuzzer sent) must reach the tool's own check, the client's 400, and never the upstream."""
    client, fake = searcher(fakes, start_gateway, "chat")
    with pytest.raises(openai.BadRequestError) as refused:
        tools: Any = [{"type": "function", "name": name, "parameters": {}}, SEARCH]
        client.responses.create(model="m", input="hi", tools=tools)
    client.close()
    error = refused.value.body
    assert isinstance(error, dict) and str(error["param"]).startswith("tools[0]")
    assert not fake.app.state.recorded
