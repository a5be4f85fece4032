"""Tool choices across the APIs, driven with the openai and anthropic SDKs through the gateway to another API.

OpenAI's ``allowed_tools`` (the model may call only some of the tools offered, the tool list kept whole for the prompt
cache): chat's and Responses' are the same choice, one nesting level apart, so it is carried (before, refused). The
Messages API has no such choice: the request offers it only the allowed tools, with the mode as its own.

Without tools, a tool choice and the parallel-calls flag ask nothing, yet OpenAI's chat API refuses them ("only
allowed when 'tools' are specified") and Anthropic's its ``tool_choice``: they are left out there (Responses clients
send ``parallel_tool_calls`` on every call, Messages clients ``disable_parallel_tool_use`` inside ``tool_choice``).
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.support.fakes import Fakes
from tests.support.recorded import StartGateway, deployment, sent

PARAMETERS = {"type": "object", "properties": {}}
HI: Any = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("upstream", ["responses", "messages"])
def test_a_chat_client_s_allowed_tools(fakes: Fakes, start_gateway: StartGateway, upstream: str) -> None:
    client, fake = deployment(fakes, start_gateway, upstream)
    tools: Any = [{"type": "function", "function": {"name": n, "parameters": PARAMETERS}} for n in ("f", "g", "h")]
    allowed = [{"type": "function", "function": {"name": "g"}}]
    choice: Any = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": allowed}}
    answer = client.chat.completions.create(model="m", messages=HI, tools=tools, tool_choice=choice)
    client.close()
    assert answer.choices[0].finish_reason in ("stop", "tool_calls")
    body = sent(fake)
    if upstream == "responses":
        assert [t["name"] for t in body["tools"]] == ["f", "g", "h"]
        assert body["tool_choice"] == {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "g"}],
        }
    else:
        assert [t["name"] for t in body["tools"]] == ["g"] and body["tool_choice"] == {"type": "any"}


def test_a_responses_client_s_allowed_tools_reach_a_chat_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    client, fake = deployment(fakes, start_gateway, "chat")
    tools: Any = [{"type": "function", "name": n, "parameters": PARAMETERS} for n in ("f", "g")]
    choice: Any = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}
    client.responses.create(model="m", input="hi", tools=tools, tool_choice=choice)
    # A built-in tool among the allowed ones is refused, naming it.
    with pytest.raises(openai.BadRequestError) as refused:
        hosted: Any = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "web_search"}]}
        client.responses.create(model="m", input="hi", tools=tools, tool_choice=hosted)
    client.close()
    assert sent(fake)["tool_choice"] == {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "f"}}]},
    }
    error: Any = refused.value.body
    assert error["param"] == "tool_choice.tools[0].type" and "'web_search'" in error["message"]
    assert len(fake.app.state.recorded) == 1


@pytest.mark.parametrize("upstream", ["chat", "messages"])
def test_without_tools_a_choice_and_the_parallel_flag_are_left_out(
    fakes: Fakes, start_gateway: StartGateway, upstream: str
) -> None:
    client, fake = deployment(fakes, start_gateway, upstream)
    client.responses.create(model="m", input="hi", parallel_tool_calls=False, tool_choice="auto")
    client.close()
    assert not {"tool_choice", "parallel_tool_calls"} & sent(fake).keys()
    if upstream == "chat":
        url = str(client.base_url).removesuffix("/v1/")
        with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10) as claude:
            choice: Any = {"type": "auto", "disable_parallel_tool_use": True}
            claude.messages.create(model="m", max_tokens=16, messages=HI, tool_choice=choice)
        assert not {"tool_choice", "parallel_tool_calls"} & sent(fake).keys()
