"""Providers' answers with any JSON value in any field: every reader reads them without raising.

What the gateway reads of an upstream answer (the meter's reading of a stream, a whole body's reading, the
translation of either into another API) runs after the client may already have the bytes. An exception
there would leave the attempt unrecorded (its slot and in-flight count never given back), so each reader
takes whatever JSON a provider sends: realistic answers of each API, with hypothesis replacing values at
random paths by scalars, lists and objects of the wrong kind.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from gateway.dialects import dialect_for
from gateway.meter import StreamMeter
from gateway.reading import read_full_reply
from gateway.tokens import TokenCounter, load_token_counter
from gateway.translate import translate_reply
from gateway.translate.stream import StreamTranslator
from tests.support.odd_json import mutated

APIS = ("chat", "responses", "messages")
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 1}}

WHOLE: dict[str, dict[str, Any]] = {
    "chat": {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi", "tool_calls": [CALL]},
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    },
    "completions": {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "hi"}], "usage": USAGE},
    "embeddings": {"object": "list", "data": [{"index": 0, "embedding": [0.1, 0.2]}], "usage": USAGE},
    "responses": {
        "id": "r",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 5, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1}},
    },
    "messages": {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 1},
    },
}

STREAM: dict[str, list[dict[str, Any]]] = {
    "chat": [
        {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi", "reasoning_content": "x"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **CALL}]}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "c", "choices": [], "usage": USAGE},
    ],
    "responses": [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "hi"},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"},
        {"type": "response.completed", "response": WHOLE["responses"]},
    ],
    "messages": [
        {"type": "message_start", "message": {"id": "msg", "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ],
}


def _sse(api: str, events: list[Any]) -> bytes:
    if api == "chat":
        return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return b"".join(
        b"event: "
        + str(e.get("type") if isinstance(e, dict) else "x").encode()
        + b"\ndata: "
        + json.dumps(e).encode()
        + b"\n\n"
        for e in events
    )


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("api", sorted(WHOLE))
def test_a_whole_answer_of_any_shape_is_read_without_raising(api: str, counter: TokenCounter) -> None:
    @SETTINGS
    @given(mutated(WHOLE[api]))
    def check(body: Any) -> None:
        read_full_reply(json.dumps(body).encode(), counter, dialect_for(api))  # type: ignore[arg-type]

    check()


@pytest.mark.parametrize("target", APIS)
@pytest.mark.parametrize("source", APIS)
def test_a_whole_answer_of_any_shape_is_translated_or_refused_as_the_providers_fault(source: str, target: str) -> None:
    @SETTINGS
    @given(mutated(WHOLE[source]))
    def check(body: Any) -> None:
        out, readable = translate_reply(json.dumps(body).encode(), source, target, {}, "m")  # type: ignore[arg-type]
        assert isinstance(json.loads(out), dict)

    check()


@pytest.mark.parametrize("api", sorted(STREAM))
def test_a_stream_of_any_shape_is_metered_without_raising(api: str, counter: TokenCounter) -> None:
    @SETTINGS
    @given(mutated(STREAM[api]))
    def check(events: Any) -> None:
        meter = StreamMeter(lambda: 1.0, 0.0, dialect_for(api))  # type: ignore[arg-type]
        for line in _sse(api, events).split(b"\n\n"):
            meter.feed(line + b"\n\n")
        meter.end_of_stream()
        meter.finish(counter)

    check()


@pytest.mark.parametrize(("source", "target"), [(s, t) for s in APIS for t in APIS if s != t])
def test_a_stream_of_any_shape_is_translated_without_raising(source: str, target: str) -> None:
    @SETTINGS
    @given(mutated(STREAM[source]))
    def check(events: Any) -> None:
        translator = StreamTranslator(source, target, {}, "m")  # type: ignore[arg-type]
        for line in _sse(source, events).split(b"\n\n"):
            translator.feed(line + b"\n\n")
        translator.flush()

    check()
