"""The fake as an agent's model (``gateway.fakes.agent``), in each API, straight from the SDKs: a shell tool
call when the user has the turn, then text quoting the tool's result."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from gateway.fakes import FakeBehavior
from tests.support.fakes import Fakes

AGENT = FakeBehavior(agent=True, agent_command="echo hi")
BASH_CHAT: Any = {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("stream", [False, True])
def test_chat_calls_the_tool_then_answers_with_its_result(fakes: Fakes, stream: bool) -> None:
    fake = fakes.start("a", AGENT)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    with openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        if stream:
            chunks = list(client.chat.completions.create(model="m", messages=messages, tools=[BASH_CHAT], stream=True))
            calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
            name = calls[0][0].function.name if calls[0][0].function else None
            arguments = "".join(c[0].function.arguments or "" for c in calls if c[0].function)
        else:
            whole = client.chat.completions.create(model="m", messages=messages, tools=[BASH_CHAT])
            tool_calls = whole.choices[0].message.tool_calls
            assert tool_calls is not None
            call = tool_calls[0]
            assert isinstance(call, ChatCompletionMessageFunctionToolCall)
            name, arguments = call.function.name, call.function.arguments
        assert name == "Bash" and json.loads(arguments) == {"command": "echo hi"}
        messages += [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "Bash", "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "hi\n"},
        ]
        answer = client.chat.completions.create(model="m", messages=messages, tools=[BASH_CHAT])
    assert answer.choices[0].message.content == "ran it: hi"


def test_messages_calls_bash_then_answers(fakes: Fakes) -> None:
    fake = fakes.start("a", AGENT)
    tools: Any = [{"name": "Bash", "input_schema": {"type": "object"}}]
    with anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0) as client:
        with client.messages.stream(
            model="m", max_tokens=64, tools=tools, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            first = stream.get_final_message()
        block = first.content[0]
        assert first.stop_reason == "tool_use" and block.type == "tool_use"
        assert block.name == "Bash" and block.input == {"command": "echo hi"}
        result: Any = [{"type": "tool_result", "tool_use_id": block.id, "content": "hi"}]
        history: Any = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [block.model_dump()]},
            {"role": "user", "content": result},
        ]
        answer = client.messages.create(model="m", max_tokens=64, tools=tools, messages=history)
    assert answer.content[0].type == "text" and answer.content[0].text == "ran it: hi"


def test_responses_calls_exec_command_then_answers(fakes: Fakes) -> None:
    fake = fakes.start("a", AGENT)
    tools: Any = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False}]
    with openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        with client.responses.stream(model="m", input="go", tools=tools, store=False) as stream:
            first = stream.get_final_response()
        call = first.output[0]
        assert call.type == "function_call" and call.name == "exec_command"
        assert json.loads(call.arguments) == {"cmd": "echo hi"}
        items: Any = [
            "go",
            call.model_dump(),
            {"type": "function_call_output", "call_id": call.call_id, "output": "hi"},
        ]
        items[0] = {"role": "user", "content": "go"}
        answer = client.responses.create(model="m", input=items, tools=tools, store=False)
    assert answer.output_text == "ran it: hi"


def test_without_a_known_shell_tool_the_answer_is_the_usual_one(fakes: Fakes) -> None:
    fake = fakes.start("a", AGENT)
    with openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
