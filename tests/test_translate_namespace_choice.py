"""An ``allowed_tools`` choice naming functions of a Responses ``namespace`` tool, through a chat or Messages
deployment, driven with the openai SDK over loopback.

The deployment knows each namespaced function by its flat name (``gateway.translate.namespaces``): an allowed entry
naming one (by ``name`` and ``namespace``, by its name alone, or its whole namespace) goes out under that flat name,
and the model's call of it comes back to the client as the namespaced call it offered. An entry naming a namespace
or function the request does not offer is refused, naming it.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall

from tests.support.fakes import Fakes
from tests.support.recorded import StartGateway, deployment, sent

SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}
CLOSE = {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [SPAWN, CLOSE]}
SHELL = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
TOOLS: Any = [SHELL, NAMESPACE]


def _allowed(*entries: dict[str, Any]) -> Any:
    return {"type": "allowed_tools", "mode": "required", "tools": list(entries)}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("upstream", ["chat", "messages"])
def test_an_allowed_namespaced_function_goes_out_flat_and_its_call_comes_back_namespaced(
    fakes: Fakes, start_gateway: StartGateway, upstream: str, stream: bool
) -> None:
    client, fake = deployment(fakes, start_gateway, upstream)
    choice = _allowed({"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"})
    response: Any
    if stream:
        with client.responses.stream(model="m", input="hi", tools=TOOLS, tool_choice=choice) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="m", input="hi", tools=TOOLS, tool_choice=choice)
    client.close()
    body = sent(fake)
    if upstream == "chat":
        assert [t["function"]["name"] for t in body["tools"]] == [
            "exec_command",
            "multi_agent_v1__spawn_agent",
            "multi_agent_v1__close_agent",
        ]
        allowed = [{"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}]
        assert body["tool_choice"] == {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": allowed}}
    else:
        assert [t["name"] for t in body["tools"]] == ["multi_agent_v1__spawn_agent"]
        assert body["tool_choice"] == {"type": "any"}
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert isinstance(call, ResponseFunctionToolCall)
    assert (call.namespace, call.name) == ("multi_agent_v1", "spawn_agent")


@pytest.mark.parametrize("upstream", ["chat", "messages"])
def test_a_bare_name_or_a_whole_namespace_is_allowed_under_the_flat_names(
    fakes: Fakes, start_gateway: StartGateway, upstream: str
) -> None:
    client, fake = deployment(fakes, start_gateway, upstream)

    def allowed_upstream(choice: Any) -> list[str]:
        client.responses.create(model="m", input="hi", tools=TOOLS, tool_choice=choice)
        body = sent(fake)
        if upstream == "messages":  # Messages has no allowed list: it is offered the allowed tools alone
            return [t["name"] for t in body["tools"]]
        return [t["function"]["name"] for t in body["tool_choice"]["allowed_tools"]["tools"]]

    # As the model calls it within its namespace (no top-level function has that name), beside a top-level one.
    bare = _allowed({"type": "function", "name": "close_agent"}, {"type": "function", "name": "exec_command"})
    names = allowed_upstream(bare)
    assert sorted(names) == ["exec_command", "multi_agent_v1__close_agent"]
    whole = _allowed({"type": "namespace", "name": "multi_agent_v1"})
    assert allowed_upstream(whole) == ["multi_agent_v1__spawn_agent", "multi_agent_v1__close_agent"]
    unknown = _allowed({"type": "function", "name": "spawn_agent", "namespace": "elsewhere"})
    offers: list[Any] = [TOOLS, [SHELL]]
    for offered in offers:  # other namespaces, or none at all
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="m", input="hi", tools=offered, tool_choice=unknown)
        error: Any = refused.value.body
        assert error["param"] == "tool_choice.tools[0]" and "elsewhere.spawn_agent" in error["message"]
    client.close()
