"""The meter reads long streams in batches (``StreamMeter.fold_at``): its readings are the same as reading the
whole stream at the end, on streams captured from the fake provider in each API (plain answers, reasoning, tool
calls, usage, Groq's usage, a malformed event), however their bytes are cut into chunks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.dialects import dialect_for
from gateway.fakes import FakeBehavior
from gateway.meter import FOLD_KEEP, StreamMeter
from gateway.samples import Endpoint
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock
from tests.support.fakes import Fakes
from tests.support.servers import ServerThread


class WholeMeter(StreamMeter):
    """Reads everything at the finish: the meter as it was before batches."""

    __slots__ = ()
    fold_at = 10**9


class EagerMeter(StreamMeter):
    """Folds as soon as it can: a batch every few chunks."""

    __slots__ = ()
    fold_at = FOLD_KEEP + 3


CAPTURES: list[tuple[Endpoint, str, dict[str, Any]]] = [
    ("chat", "/chat/completions", {"fake": {"output_tokens": 120}}),
    ("chat", "/chat/completions", {"fake": {"output_tokens": 60, "reasoning_tokens": 20, "chunk_tokens": 3}}),
    ("chat", "/chat/completions", {"fake": {"output_tokens": 40, "tool_call": True}}),
    ("chat", "/chat/completions", {"stream_options": {"include_usage": True}, "fake": {"output_tokens": 80}}),
    ("chat", "/chat/completions", {"fake": {"output_tokens": 50, "malformed_after": 30}}),
    ("messages", "/messages", {"max_tokens": 500, "fake": {"output_tokens": 90}}),
    ("responses", "/responses", {"fake": {"output_tokens": 70}}),
]


@pytest.fixture(scope="module")
def captured() -> Iterator[list[tuple[Endpoint, bytes]]]:
    servers: list[ServerThread] = []
    fake = Fakes(servers).start("a", FakeBehavior(), record=False)
    streams = []
    for api, path, extra in CAPTURES:
        body: dict[str, Any] = {"model": "m", "stream": True, **extra}
        if api == "responses":
            body["input"] = "hi"
        else:
            body["messages"] = [{"role": "user", "content": "hi"}]
        response = httpx.post(fake.base_url + path, json=body, timeout=10)
        assert response.status_code == 200, response.text
        streams.append((api, response.content))
    # Groq's own usage, not asked for: a chunk the fake does not send, appended to a captured answer.
    groq = {"choices": [], "x_groq": {"usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_time": 0.5}}}
    chat_answer = streams[0][1].removesuffix(b"data: [DONE]\n\n")
    streams.append(("chat", chat_answer + b"data: " + json.dumps(groq).encode() + b"\n\ndata: [DONE]\n\n"))
    yield streams
    for server in reversed(servers):
        server.stop()


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def read(meter_class: type[StreamMeter], api: Endpoint, pieces: list[bytes], counter: TokenCounter) -> Any:
    clock = FakeClock()
    meter = meter_class(clock, 0.0, dialect_for(api))
    for piece in pieces:
        clock.now += 0.001
        meter.feed(piece)
    meter.end_of_stream()
    return meter.finish(counter), meter.done, meter.first_output_at


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(stream), *(p % (len(stream) + 1) for p in points)})
    return [stream[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(min_value=0, max_value=len(CAPTURES)), points=st.lists(st.integers(0, 1 << 20), max_size=60))
def test_a_stream_read_in_batches_reads_as_it_did_whole(
    captured: list[tuple[Endpoint, bytes]], counter: TokenCounter, which: int, points: list[int]
) -> None:
    api, stream = captured[which]
    events = stream.split(b"\n\n")  # one event a chunk, as providers flush, and the same bytes cut at random
    for pieces in ([e + b"\n\n" for e in events if e], cut(stream, points)):
        assert read(EagerMeter, api, pieces, counter) == read(WholeMeter, api, pieces, counter)


def test_a_long_stream_holds_a_few_hundred_events_not_all(counter: TokenCounter) -> None:
    piece = b'data: {"choices":[{"index":0,"delta":{"content":" word"}}]}\n\n'
    meter = StreamMeter(FakeClock(), 0.0)
    meter.feed(piece)  # the first output
    for _ in range(10_000):
        meter.feed(piece)
        assert len(meter._events) < StreamMeter.fold_at  # held: at most one batch
    meter.feed(b"data: [DONE]\n\n")
    reading = meter.finish(counter)
    assert reading.output_tokens == 10_001 and len(reading.chunk_gaps_s) == 10_000
