"""The fake provider speaks OpenAI well enough for the real SDK, and misbehaves exactly on demand."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def sdk(fake: FakeServer, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key=api_key, max_retries=0, timeout=10)


def raw_events(fake: FakeServer, body: dict[str, object]) -> list[bytes]:
    with httpx.Client(timeout=10) as client:
        response = client.post(fake.base_url + "/chat/completions", json={**body, "stream": True})
        return [line for line in response.content.split(b"\n\n") if line]


def test_chat_whole_and_streamed_give_the_same_answer(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=12))
    client = sdk(fake)
    whole = client.chat.completions.create(model="some-model", messages=MESSAGES)
    assert whole.model == "some-model"
    assert whole.choices[0].message.content == "".join(answer_words(0, 12))
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    stream = client.chat.completions.create(
        model="some-model", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    assert fake.app.state.completed == 2
    assert fake.app.state.open_streams == 0


def test_max_tokens_cuts_the_answer(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=50))
    result = sdk(fake).chat.completions.create(model="m", messages=MESSAGES, max_tokens=5)
    assert result.choices[0].message.content == "".join(answer_words(0, 5))
    assert result.choices[0].finish_reason == "length"
    result = sdk(fake).chat.completions.create(model="m", messages=MESSAGES, max_completion_tokens=3, n=2)
    assert [c.message.content for c in result.choices] == ["".join(answer_words(0, 3))] * 2


def test_completions_embeddings_and_models(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=4, embedding_dim=5), models=("a", "b"))
    client = sdk(fake)
    completion = client.completions.create(model="m", prompt="say")
    assert completion.choices[0].text == "".join(answer_words(0, 4))
    streamed = "".join(c.choices[0].text for c in client.completions.create(model="m", prompt="say", stream=True))
    assert streamed == completion.choices[0].text
    floats = client.embeddings.create(model="e", input=["one", "two"], encoding_format="float")
    assert [len(d.embedding) for d in floats.data] == [5, 5]
    packed = client.embeddings.create(model="e", input=["one", "two"])  # the SDK asks for base64
    for got, expected in zip(packed.data, floats.data, strict=True):
        assert got.embedding == pytest.approx(expected.embedding, rel=1e-6)
    assert [m.id for m in client.models.list()] == ["a", "b"]


def test_tool_call_and_reasoning(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=3, tool_call=True, reasoning_tokens=2))
    chunks = list(sdk(fake).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = [d.model_extra.get("reasoning_content") for d in deltas if d.model_extra]
    assert [r for r in reasoning if r] == answer_words(0, 2)
    calls = [call for d in deltas for call in d.tool_calls or []]
    assert calls[0].function is not None and calls[0].function.name == "lookup"
    # The words as the JSON arguments' string, as Messages and the Responses API carry them too.
    assert (
        "".join((c.function.arguments or "") for c in calls if c.function)
        == '{"q": "' + "".join(answer_words(0, 3)) + '"}'
    )
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_error_status_with_retry_after(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(status=429, retry_after="7"))
    with pytest.raises(openai.RateLimitError) as info:
        sdk(fake).chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.body == {"message": "fake p: error 429", "type": "rate_limit_error", "param": None, "code": None}


def test_fail_first_then_succeed(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(status=503, fail_first=1))
    with pytest.raises(openai.InternalServerError):
        sdk(fake).chat.completions.create(model="m", messages=MESSAGES)
    assert sdk(fake).chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content


def test_per_request_and_per_server_overrides(fakes: Fakes) -> None:
    first, second = fakes.start("first"), fakes.start("second")
    fake = {"output_tokens": 2, "servers": {"second": {"status": 400, "error_code": "context_length_exceeded"}}}
    result = sdk(first).chat.completions.create(model="m", messages=MESSAGES, extra_body={"fake": fake})
    assert result.choices[0].message.content == "".join(answer_words(0, 2))
    with pytest.raises(openai.BadRequestError) as info:
        sdk(second).chat.completions.create(model="m", messages=MESSAGES, extra_body={"fake": fake})
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="unknown fake behaviour fields: colour"):
        sdk(first).chat.completions.create(model="m", messages=MESSAGES, extra_body={"fake": {"colour": 1}})


def test_a_draw_seed_makes_a_requests_draws_its_own_and_repeatable(fakes: Fakes) -> None:
    fake = fakes.start("flaky", FakeBehavior(error_rate=0.5, status=503, output_tokens=2, ttft_jitter=0.5))
    client = sdk(fake)

    def fails(seed: int) -> bool:
        try:
            client.chat.completions.create(model="m", messages=MESSAGES, extra_body={"fake": {"draw_seed": seed}})
        except openai.InternalServerError:
            return True
        return False

    first = [fails(seed) for seed in range(24)]
    assert any(first) and not all(first)  # each request draws its own failure at the configured rate
    assert [fails(seed) for seed in range(24)] == first  # and the same again, whatever came in between


def _anonymous(events: list[bytes]) -> list[bytes]:
    """Events without what differs between two requests: their id and their creation second."""
    return [re.sub(rb'"id": "fake-\d+"|"created": \d+', b"", event) for event in events]


def test_stream_faults(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=4))
    normal = raw_events(fake, {"model": "m"})
    assert normal[-1] == b"data: [DONE]"
    assert b'"finish_reason": "stop"' in normal[-2]
    no_done = raw_events(fake, {"model": "m", "fake": {"no_done": True}})
    assert _anonymous(no_done) == _anonymous(normal[:-1])
    bare = raw_events(fake, {"model": "m", "fake": {"no_done": True, "no_finish": True}})
    assert b'finish_reason": "stop' not in b"".join(bare) and len(bare) == 5
    malformed = raw_events(fake, {"model": "m", "fake": {"malformed_after": 1}})
    assert b"data: {not json" in malformed
    error = raw_events(fake, {"model": "m", "fake": {"error_event_after": 2}})
    assert json.loads(error[-1][6:])["error"]["message"] == "fake p: error mid-stream"
    assert len(error) == 4  # role, two answer chunks, the error; no [DONE]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_drop_breaks_the_connection_and_logs_no_traceback(fakes: Fakes) -> None:
    # The server's own log, as `gateway fake-provider` and the demo print it: a planned drop is not a crash.
    fake = fakes.start("p", FakeBehavior(output_tokens=8, drop_after=2))
    handler = _Collect()
    records = handler.records
    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(handler)  # after the server started: uvicorn's log set-up replaces the handlers
    try:
        with pytest.raises(openai.APIError):
            list(sdk(fake).chat.completions.create(model="m", messages=MESSAGES, stream=True))
        # A real crash inside the app is still reported, traceback and all.
        fake.app.behavior = FakeBehavior(output_tokens="eight")  # type: ignore[arg-type]
        with pytest.raises(openai.APIError):
            list(sdk(fake).chat.completions.create(model="m", messages=MESSAGES, stream=True))
        wait_until(lambda: any(r.exc_info for r in records), what="the crash logged")
    finally:
        server_log.removeHandler(handler)
    logged = [(r.getMessage().strip(), r.exc_info[0] if r.exc_info else None) for r in records]
    assert len(logged) == 1 and logged[0][0] == "Exception in ASGI application", logged
    assert logged[0][1] is TypeError


def test_pacing_follows_ttft_and_speed(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(ttft_s=0.2, tokens_per_s=100, output_tokens=11))
    started = time.perf_counter()
    list(sdk(fake).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    # At least the configured time: ttft + 10 gaps of 10 ms (no upper bound: the machine may be busy).
    assert time.perf_counter() - started >= 0.2 + 0.1


def test_api_key_is_checked(fakes: Fakes) -> None:
    fake = fakes.start("p", api_key="sk-right")
    with pytest.raises(openai.AuthenticationError):
        sdk(fake, "sk-wrong").chat.completions.create(model="m", messages=MESSAGES)
    assert sdk(fake, "sk-right").chat.completions.create(model="m", messages=MESSAGES).choices


def test_behavior_and_state_endpoints(fakes: Fakes) -> None:
    fake = fakes.start("p")
    with httpx.Client(base_url=fake.url, timeout=5) as client:
        changed = client.post("/_fake/behavior", json={"status": 503})
        assert changed.status_code == 200 and changed.json()["status"] == 503
        assert client.post("/_fake/behavior", json={"nope": 1}).status_code == 400
        failed = client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        assert failed.status_code == 503
        state = client.get("/_fake/state").json()
        assert state == {
            "name": "p",
            "requests": 1,
            "open_streams": 0,
            "max_open_streams": 0,
            "completed": 0,
            "cancelled": 0,
            "in_flight": 0,
            "max_in_flight": 1,
            "refused": 0,
            "cache": {"hits": 0, "misses": 0, "cached_tokens": 0, "prompt_tokens": 0},
        }
        assert client.get("/v1/nothing").status_code == 404
        assert client.post("/v1/chat/completions", content=b"{oops").status_code == 400


def test_a_call_of_a_declared_tool_is_short_and_ends_by_itself_broken_or_not(fakes: Fakes) -> None:
    """A call's arguments are a few words, as a model's are, not an answer as long as the limit allows: within a
    client's usual ``max_tokens`` the call ends with ``tool_calls``, so a broken one arrives whole and can be judged
    (cut by the limit, every call of the demo's provider with bad tool calls looked merely cut)."""
    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    tools: list[Any] = [{"type": "function", "function": weather}]
    for fault, valid in ((None, True), ("invalid_tool_json", False)):
        fake = fakes.start(f"p-{valid}", FakeBehavior(output_tokens=300, fault=fault))
        answer = sdk(fake).chat.completions.create(model="m", messages=MESSAGES, tools=tools, max_tokens=64)
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls is not None
        arguments = choice.message.tool_calls[0].function.arguments  # type: ignore[union-attr]
        try:
            city = json.loads(arguments)["city"]
        except ValueError:
            city = None
        assert (city is not None) == valid, arguments
        assert answer.usage is not None and answer.usage.completion_tokens <= 12
