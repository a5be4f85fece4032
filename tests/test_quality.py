"""The verdict on each answer (``gateway.quality``), on real captured answers of each API.

``tests/fixtures/quality/fake.json`` holds the fake provider's answers with each quality fault forced,
``llama.json`` llama.cpp's (Gemma 3 270M) answers to the same questions; both were captured with
``python -m tests.quality_capture`` and are replayed here through the meter, as the relay reads them,
then judged against what their request asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects import dialect_for
from gateway.meter import StreamMeter
from gateway.quality import degenerate, expectation_of, judge, schema_problem
from gateway.reading import Reading, read_full_reply
from gateway.samples import Endpoint
from gateway.tokens import TokenCounter, load_token_counter

FIXTURES = Path(__file__).parent / "fixtures" / "quality"
COUNTER: TokenCounter = load_token_counter("o200k_base")

FAKE_VERDICTS = {
    "plain": "valid",
    "tools": "valid",
    "invalid_tool_json": "tool_args_not_json",
    "empty": "empty",
    "repeat": "degenerate",
    "truncate": "truncated",
}
"""The verdict of each forced fault, in every API and mode (but below)."""
LLAMA_VERDICTS = {
    # Without a chat template of its own the model continues the prompt until the limit: a length stop at the
    # limit is the request's own, and a short run of it is not yet a loop ...
    "chat-stream-plain": "valid",
    "chat-body-plain": "valid",
    # ... but asked for JSON it loops inside a string until the limit.
    "chat-json-llama": "degenerate",
}


def _case(source: str, name: str) -> dict[str, Any]:
    cases = json.loads((FIXTURES / f"{source}.json").read_text())
    return next(c for c in cases if c["name"] == name)


def _cases(source: str) -> list[dict[str, Any]]:
    return list(json.loads((FIXTURES / f"{source}.json").read_text()))


def replay(case: dict[str, Any]) -> Reading:
    """What the meter reads of the captured answer: fed as one chunk for a stream, whole for a body."""
    api: Endpoint = case["api"]
    dialect = dialect_for(api)
    raw = case["raw"].encode()
    if not case["request"].get("stream"):
        return read_full_reply(raw, COUNTER, dialect)
    meter = StreamMeter(lambda: 0.0, 0.0, dialect)
    meter.feed(raw)
    meter.end_of_stream()
    return meter.finish(COUNTER)


def verdict(case: dict[str, Any]) -> str:
    return judge(replay(case), expectation_of(case["api"], case["request"]))


@pytest.mark.parametrize("case", _cases("fake"), ids=lambda c: c["name"])
def test_each_fault_of_the_fake_gets_its_verdict(case: dict[str, Any]) -> None:
    fault = case["name"].split("-", 2)[2]
    expected = FAKE_VERDICTS.get(fault, "json_invalid")  # chat-json-fake: words where JSON was asked for
    if case["name"] == "messages-body-invalid_tool_json":
        # A whole Messages body carries the input decoded: the broken arguments arrive as a string, not an object.
        expected = "tool_args_schema"
    assert verdict(case) == expected


@pytest.mark.parametrize("case", _cases("llama"), ids=lambda c: c["name"])
def test_llama_cpp_answers_get_their_verdicts(case: dict[str, Any]) -> None:
    assert case["status"] == 200
    assert verdict(case) == LLAMA_VERDICTS.get(case["name"], "valid")


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_tool_calls_are_read_with_their_names_and_arguments(api: str) -> None:
    for mode in ("stream", "body"):
        reading = replay(_case("fake", f"{api}-{mode}-tools"))
        ((call),) = reading.calls
        assert call.name == "get_weather"
        assert json.loads(call.arguments) == {"city": "".join(json.loads(call.arguments)["city"])}
        assert reading.stop == "tool"


def test_a_call_that_breaks_the_declared_schema() -> None:
    """The fake's valid call (``{"city": ...}``), to a request whose tool also requires an integer ``days``."""
    case = _case("fake", "chat-body-tools")
    request = json.loads(json.dumps(case["request"]))
    request["tools"][0]["function"]["parameters"]["required"] = ["city", "days"]
    assert judge(replay(case), expectation_of("chat", request)) == "tool_args_schema"
    request["tools"][0]["function"]["name"] = "get_time"  # a call to a tool the request never declared
    request["tools"][0]["function"]["parameters"]["required"] = ["city"]
    assert judge(replay(case), expectation_of("chat", request)) == "tool_args_schema"


def test_wrong_stop_both_ways() -> None:
    """Captured answers, their stop reason edited: a call that says ``stop``, text that says ``tool_calls``."""
    called = _case("fake", "chat-body-tools")
    edited = dict(
        called,
        raw=called["raw"]
        .replace('"tool_calls"}', '"stop"}')
        .replace('"finish_reason": "tool_calls"', '"finish_reason": "stop"'),
    )
    assert verdict(edited) == "wrong_stop"
    plain = _case("fake", "chat-stream-plain")
    edited = dict(plain, raw=plain["raw"].replace('"finish_reason": "stop"', '"finish_reason": "tool_calls"'))
    assert verdict(edited) == "wrong_stop"
    # The Responses API states no tool stop of its own: its verdicts never say wrong_stop.
    assert expectation_of("responses", {"tools": []}).tool_stop is False


def test_json_mode_and_schema_mode() -> None:
    case = _case("fake", "chat-json-fake")
    reading = replay(case)
    good = Reading(answer_text='{"city": "Paris", "days": 3}', stop="stop", output_tokens=12)
    schema = {"type": "object", "required": ["city"], "properties": {"days": {"type": "integer"}}}
    request = {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}
    expects = expectation_of("chat", request)
    assert expects.kind == "json" and judge(good, expects) == "valid"
    assert judge(Reading(answer_text='{"days": 3}', stop="stop"), expects) == "json_schema"
    assert judge(reading, expects) == "json_invalid"
    # Cut at the request's own limit: the limit broke it, not the provider.
    assert (
        judge(
            Reading(answer_text='{"city": "Par', stop="length", output_tokens=90),
            expectation_of("chat", {**request, "max_tokens": 100}),
        )
        == "valid"
    )
    responses = expectation_of(
        "responses", {"text": {"format": {"type": "json_schema", "name": "w", "schema": schema}}}
    )
    assert responses.kind == "json" and responses.schema == schema
    messages = expectation_of("messages", {"output_format": {"type": "json_schema", "schema": schema}, "max_tokens": 9})
    assert messages.kind == "json" and messages.max_tokens == 9
    # The GA field, as the anthropic SDK's ``messages.parse`` sends it.
    ga = expectation_of("messages", {"output_config": {"format": {"type": "json_schema", "schema": schema}}})
    assert ga.kind == "json" and ga.schema == schema


def test_kinds_per_api() -> None:
    assert expectation_of("chat", {"tools": [{"type": "function", "function": {"name": "f"}}]}).kind == "tools"
    assert (
        expectation_of("chat", {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}).kind
        == "plain"
    )
    assert expectation_of("chat", {"response_format": {"type": "json_object"}}).kind == "json"
    assert (
        expectation_of("messages", {"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "none"}}).kind
        == "plain"
    )
    assert expectation_of("responses", {"tools": [{"type": "function", "name": "f"}]}).kind == "tools"
    assert expectation_of("completions", {"prompt": "x"}).max_tokens == 16  # the API's own default
    assert expectation_of("embeddings", {"input": "x"}).judged is False


def test_degenerate_is_a_loop_not_long_text() -> None:
    from gateway.fakes.behavior import answer_words

    assert not degenerate("".join(answer_words(0, 3000)))  # the fake's long answers do not loop
    prose = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text()
    assert not degenerate(prose)  # real prose, tables and code blocks included
    table = "\n".join(f"| {i} | name{i} | {i * 3} |" for i in range(200))
    assert not degenerate(table)
    assert degenerate("all work and no play makes jack a dull boy " * 20)
    assert degenerate("好" * 400)
    assert not degenerate("all work and no play " * 5)  # too short to call a loop


def test_schema_subset() -> None:
    schema = {
        "type": "object",
        "required": ["a", "tags"],
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"enum": ["x", "y"]}},
            "n": {"type": "number"},
        },
    }
    assert schema_problem({"a": 1, "tags": ["x"], "b": None, "n": 2}, schema) is None
    assert schema_problem({"a": 1.0, "tags": []}, schema) is None  # 1.0 is an integer in JSON Schema
    assert schema_problem({"a": True, "tags": []}, schema) == "$.a: expected integer, got boolean"
    assert schema_problem({"a": 1}, schema) == "$: missing required key 'tags'"
    assert schema_problem({"a": 1, "tags": ["z"]}, schema) == "$.tags[0]: 'z' is not one of the enum's 2 values"
    assert schema_problem({"a": 1, "tags": [], "b": 3}, schema) == "$.b: expected string or null, got integer"
    assert schema_problem([1], {"anyOf": [{"type": "string"}]}) is None  # keywords it does not read never fail
