"""Property-based fuzz of request bodies and headers against a running gateway: never a 5xx, never a crash.

Agent traffic too: Messages and Responses requests in the shape Claude Code and Codex send, odd values at random
places, to a deployment of each API (``test_fuzzed_agent_requests_never_get_a_5xx``).

The gateway fronts a healthy fake provider, so every 5xx would be the gateway's own failure.
Bodies range from raw bytes and arbitrary JSON to OpenAI-shaped requests with hostile field
values; headers are arbitrary names and values (credentials, content types, forwarding hints).
The example count is bounded so the run stays within seconds.
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.fakes import FakeBehavior, FakeProvider
from gateway.samples import SampleLog
from tests.support.odd_json import mutated
from tests.support.servers import ServerThread

PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models")
# Fields the fake provider obeys as instructions (it would fail on purpose) and framing httpx owns.
RESERVED_FIELDS = {"fake"}
RESERVED_HEADERS = {"x-fake-behavior", "content-length", "transfer-encoding", "host", "connection", "expect"}

# Strings Python's JSON accepts but that are not Unicode (lone surrogates), beside a valid pair.
odd_strings = st.sampled_from(["\ud800", "x\udfffy", "\ud83d\ude00", "\\ud800", "\x00", "\u2028"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    odd_strings,
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10) | odd_strings, children, max_size=4)
    ),
    max_leaves=20,
)
field_names = st.text(max_size=12).filter(lambda name: name not in RESERVED_FIELDS)
messages = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "tool", "bogus"]), "content": json_values}
        ),
        json_values,
    ),
    max_size=5,
)
INPUT_FIELDS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt", "/v1/embeddings": "input"}
options = st.fixed_dictionaries(
    {},
    optional={
        "stream": st.one_of(st.booleans(), json_values),
        "max_tokens": st.one_of(st.integers(min_value=-5, max_value=10**12), json_values),
        "max_completion_tokens": st.one_of(st.integers(min_value=-5, max_value=10**6), json_values),
        "n": st.one_of(st.integers(min_value=-2, max_value=20), json_values),
        "best_of": st.one_of(st.integers(min_value=-2, max_value=20), json_values),
        "stream_options": json_values,
        "provider": json_values,
        "tools": json_values,
        "encoding_format": st.one_of(st.sampled_from(["float", "base64"]), json_values),
    },
)


@st.composite
def bodies(draw: st.DrawFn, path: str) -> bytes:
    """Mostly requests that pass validation far enough to reach the provider, with hostile values inside."""
    kind = draw(st.sampled_from(["openai", "openai", "openai", "openai", "json", "text", "bytes"]))
    if kind == "openai":
        body: dict[str, Any] = {}
        if draw(st.integers(0, 9)):
            body["model"] = "m"
        else:
            body["model"] = draw(st.one_of(st.text(max_size=20), json_values))
        field = INPUT_FIELDS.get(path, "messages")
        if draw(st.integers(0, 9)):
            body[field] = draw(messages.filter(bool) if field == "messages" else json_values)
        body.update(draw(options))
        body.update(draw(st.dictionaries(field_names, json_values, max_size=3)))
        return json.dumps(body, allow_nan=True).encode()
    if kind == "json":
        return json.dumps(draw(json_values), allow_nan=True).encode()
    if kind == "text":
        return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    return draw(st.binary(max_size=200))


header_names = st.one_of(
    st.sampled_from(
        ["authorization", "api-key", "content-type", "x-forwarded-host", "forwarded", "x-request-id", "accept"]
    ),
    st.text(alphabet=string.ascii_lowercase + string.digits + "-_", min_size=1, max_size=20),
).filter(lambda name: name not in RESERVED_HEADERS)
header_values = st.text(alphabet=string.printable.strip() + " ", max_size=60).map(str.strip)


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    fake = ServerThread(FakeProvider("p", FakeBehavior(output_tokens=8))).start()
    config = parse_config(
        {
            "providers": [
                {"name": "p", "base_url": fake.url + "/v1"},
                {"name": "pm", "base_url": fake.url + "/v1", "apis": ["messages"]},
                {"name": "pr", "base_url": fake.url + "/v1", "apis": ["responses"]},
            ],
            "models": [
                {"name": "m", "deployments": [{"provider": "p", "model": "up"}]},
                {"name": "to-messages", "deployments": [{"provider": "pm", "model": "up"}]},
                {"name": "to-responses", "deployments": [{"provider": "pr", "model": "up"}]},
            ],
            "limits": {"max_n": 4, "max_tokens": 10**9},
        },
        source="fuzz.toml",
    )
    gateway = ServerThread(create_app(config, AppOptions(environ={}, sinks=[SampleLog()]))).start()
    yield gateway.url
    gateway.stop()
    fake.stop()


@pytest.fixture(scope="module")
def http(gateway_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway_url, timeout=30) as client:
        yield client


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), path=st.sampled_from(PATHS), headers=st.dictionaries(header_names, header_values, max_size=5))
def test_fuzzed_requests_never_get_a_5xx(
    http: httpx.Client, caplog: pytest.LogCaptureFixture, data: st.DataObject, path: str, headers: dict[str, str]
) -> None:
    body = data.draw(bodies(path), label="body")
    with caplog.at_level(logging.ERROR):
        if path == "/v1/models":
            response = http.get(path, headers=headers)
        else:
            response = http.post(path, content=body, headers=headers)
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and "Traceback" not in error["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


TOOL = {"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
AGENT_REQUESTS: dict[str, dict[str, Any]] = {
    # A chat client's tool loop: tools, an assistant's call and the tool's result.
    "/v1/chat/completions": {
        "model": "m",
        "stream": False,
        "max_tokens": 64,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": TOOL["input_schema"]}}],
        "tool_choice": "auto",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    },
    # What Claude Code sends, in small: a system prompt, tools, a tool call and its result, thinking.
    "/v1/messages": {
        "model": "m",
        "max_tokens": 64,
        "stream": False,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "tools": [TOOL],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": "x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ],
    },
    # What Codex sends, in small: instructions, input items with a call and its output, tools, reasoning.
    "/v1/responses": {
        "model": "m",
        "stream": False,
        "store": False,
        "instructions": "be brief",
        "reasoning": {"effort": "low", "summary": "auto"},
        "tools": [{"type": "function", "name": "f", "parameters": TOOL["input_schema"]}],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ],
    },
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    path=st.sampled_from(sorted(AGENT_REQUESTS)),
    model=st.sampled_from(["m", "to-messages", "to-responses"]),
)
def test_fuzzed_agent_requests_never_get_a_5xx(
    http: httpx.Client, caplog: pytest.LogCaptureFixture, data: st.DataObject, path: str, model: str
) -> None:
    # To a deployment of each API (translated, or not): every odd value is refused in the client's own API's error
    # shape, or carried.
    stream = data.draw(st.booleans(), label="stream")
    body = data.draw(mutated({**AGENT_REQUESTS[path], "stream": stream, "model": model}), label="body")
    with caplog.at_level(logging.ERROR):
        response = http.post(path, content=json.dumps(body, allow_nan=True).encode())
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        error = response.json()
        if path == "/v1/messages":
            assert error["type"] == "error" and set(error["error"]) == {"type", "message"}, error
        else:
            assert set(error["error"]) == {"message", "type", "param", "code"}, error
        assert "Traceback" not in json.dumps(error)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.parametrize("model", ["m", "to-messages", "to-responses"])
@pytest.mark.parametrize("path", sorted(AGENT_REQUESTS))
def test_the_agent_requests_unfuzzed_are_answered(http: httpx.Client, path: str, model: str) -> None:
    # What the fuzz above starts from reaches each deployment and is answered: its 4xx are the odd values' doing.
    response = http.post(path, json={**AGENT_REQUESTS[path], "model": model})
    assert response.status_code == 200, response.text


def test_still_healthy_after_the_fuzz(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert http.post("/v1/chat/completions", json=body).status_code == 200
