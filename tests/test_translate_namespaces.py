"""Responses ``namespace`` tools (Codex's sub-agent tools) through a chat or Messages deployment, both ways.

Each namespaced function goes out as one flat function, a call to it comes back as the namespaced
``function_call`` the client offered (whole and streamed), and the call in the next turn's history goes out
under the same flat name: the model sees one consistent tool across turns.
"""

from __future__ import annotations

import json
import re
from typing import Any

from openai.types.responses import ResponseFunctionToolCall

from gateway.translate import translate_reply, translate_request
from gateway.translate.namespaces import flat_names, split
from tests.support.translation import chat_chunks_as_responses_events

SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Spawn a sub-agent.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}
CLOSE = {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [SPAWN, CLOSE],
}
SHELL = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
ARGS = '{"message":"look"}'


def codex_request(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", "tools": [SHELL, NAMESPACE], "stream": False, "store": False, **extra}


def test_namespaced_functions_go_out_flat_and_the_call_comes_back_namespaced() -> None:
    request = codex_request()
    sent = translate_request(request, "responses", "chat", "up")
    functions = [t["function"] for t in sent["tools"]]
    assert [f["name"] for f in functions] == [
        "exec_command",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__close_agent",
    ]
    assert functions[1]["parameters"] == SPAWN["parameters"]
    assert functions[1]["description"] == "Tools for spawning and managing sub-agents.\n\nSpawn a sub-agent."
    call = {"id": "call_1", "type": "function", "function": {"name": "multi_agent_v1__spawn_agent", "arguments": ARGS}}
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "model": "up",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "tool_calls": [call]}, "finish_reason": "tool_calls"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    body, readable = translate_reply(json.dumps(answer).encode(), "chat", "responses", request, "m")
    assert readable
    reply = json.loads(body)
    (output,) = reply["output"]
    item = ResponseFunctionToolCall.model_validate(output)  # the SDK's own type of the item
    assert (item.name, item.namespace, item.call_id, item.arguments) == (
        "spawn_agent",
        "multi_agent_v1",
        "call_1",
        ARGS,
    )
    # The next turn: the call (as the client keeps it, namespace and all) and its output go back flat.
    history = [
        {"role": "user", "content": "hi"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": ARGS,
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "spawned"},
    ]
    again = translate_request(codex_request(input=history), "responses", "chat", "up")
    assistant = again["messages"][1]
    assert assistant["tool_calls"][0]["function"] == {"name": "multi_agent_v1__spawn_agent", "arguments": ARGS}
    assert again["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "spawned"}
    assert again["tools"] == sent["tools"]  # the same bytes every turn: the provider's prefix cache hits


def test_a_streamed_call_comes_back_namespaced() -> None:
    request = codex_request(stream=True)
    first = {"id": "c", "call_id": "call_7", "name": "multi_agent_v1__close_agent", "arguments": "{}"}
    chunks = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": first["call_id"],
                                "type": "function",
                                "function": {"name": first["name"], "arguments": ""},
                            }
                        ],
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    events = chat_chunks_as_responses_events(request, chunks)
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    completed = next(e["response"] for e in events if e["type"] == "response.completed")
    (output,) = completed["output"]
    item = ResponseFunctionToolCall.model_validate(output)
    assert (added["name"], added["namespace"], done["name"]) == ("close_agent", "multi_agent_v1", "close_agent")
    assert (item.name, item.namespace, item.call_id, item.arguments) == (
        "close_agent",
        "multi_agent_v1",
        "call_7",
        "{}",
    )


def test_a_messages_deployment_gets_the_same_flat_names() -> None:
    sent = translate_request(codex_request(), "responses", "messages", "up")
    assert [t["name"] for t in sent["tools"]] == [
        "exec_command",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__close_agent",
    ]


def test_flat_names_are_valid_distinct_and_reversible() -> None:
    taken = {"type": "function", "name": "ns__f", "parameters": {}}
    long_name = "n" * 50
    tools = [
        taken,
        {"type": "namespace", "name": "ns", "description": "", "tools": [{"type": "function", "name": "f"}]},
        {"type": "namespace", "name": long_name, "description": "", "tools": [{"type": "function", "name": "g" * 30}]},
        {"type": "namespace", "name": "a.b", "description": "", "tools": [{"type": "function", "name": "c"}]},
    ]
    names = flat_names(tools)
    flat = list(names.values())
    assert len(set(flat) | {"ns__f"}) == len(flat) + 1  # distinct, and none is the top-level function's
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name in flat)
    request = {"tools": tools}
    for (namespace, function), name in names.items():
        assert split(name, request) == (function, namespace)
    assert split("ns__f", request) == ("ns__f", None)  # the top-level function stays itself


def test_a_forced_namespaced_function_is_forced_under_its_flat_name() -> None:
    sent = translate_request(
        codex_request(tool_choice={"type": "function", "name": "spawn_agent"}), "responses", "chat", "up"
    )
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}
