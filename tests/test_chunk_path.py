"""The per-chunk path's fast scans read exactly as the scans they replaced, and the relay's bytes are the same.

The meter and the forwarder look at every relayed chunk with a few byte scans. Those are now ``find`` instead
of ``in``, the meter looks for chat's ``[DONE]`` and Messages' ``message_stop`` itself (``Dialect.end_mark``),
and Messages' ``may_finish`` looks for ``"stop_reason"`` before its regex. Each is held here to the former form,
written out below as it was: the scans on random and adversarial bytes, and the meter and the forwarder, fed
random cuttings of real streams of each API (chat, OpenAI's padded chat, Responses, Messages), against the same
classes running the former scans (every reading after each chunk, the finish's ``Reading``, every forwarded byte).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.hotpath_memory import openai_stream_chunks, stream_chunks
from gateway.dialects import Dialect, dialect_for
from gateway.meter import StreamMeter
from gateway.reading import Reading
from gateway.relay.forward import _EMPTY_CHOICES, _ERROR_KEY, _USAGE_KEY, EventForwarder, _last_boundary
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock

FIXTURES = Path(__file__).parent / "fixtures" / "openai"
SENT_AT = 100.0

# The former scans, as they were written.
_OLD_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"')
_OLD_STOP = re.compile(rb'"message_stop"')
_OLD_STOP_REASON = re.compile(rb'"stop_reason"\s*:\s*"')


def old_may_end(api: str, data: bytes) -> bool:
    if api == "chat":
        return b"[DONE]" in data
    if api == "messages":
        return _OLD_STOP.search(data) is not None
    return dialect_for("responses").may_end(data)  # unchanged


def old_may_finish(api: str, data: bytes) -> bool:
    if api == "chat":
        return _OLD_FINISH_REASON.search(data) is not None
    if api == "messages":
        return _OLD_STOP_REASON.search(data) is not None
    return dialect_for("responses").may_finish(data)  # unchanged


class OldScans:
    """A dialect with the former scans and no ``end_mark`` (the meter then calls ``may_end``, as it always did)."""

    end_mark = None

    def __init__(self, api: str) -> None:
        self._api = api
        self._dialect = dialect_for(api)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dialect, name)

    def may_end(self, data: bytes) -> bool:
        return old_may_end(self._api, data)

    def may_finish(self, data: bytes) -> bool:
        return old_may_finish(self._api, data)


class OldForwarder(EventForwarder):
    """``EventForwarder.feed`` as it was (``in`` scans, the tail always reset)."""

    __slots__ = ()

    def feed(self, chunk: bytes) -> bytes:
        if self.error is not None:
            return b""
        data = self._tail + chunk if self._tail else chunk
        if self._opening or _ERROR_KEY in data or (self._said and _USAGE_KEY in data):
            return self._sift(data)
        if self._drop_usage and b"[]" in data and _EMPTY_CHOICES.search(data):
            return self._sift(data) if b"\r" in data else self._without_usage(data)
        if data.endswith(b"\n\n"):
            self._tail = b""
            return data
        cut = _last_boundary(data)
        self._tail = data[cut:]
        return data[:cut]


# -- Streams ---------------------------------------------------------------------------------------------


def named(event: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + json.dumps(payload).encode() + b"\n\n"


def chat_spaced() -> bytes:
    """A chat stream as ``json.dumps`` writes it (``"finish_reason": null``, with a space), texts that mention the
    markers, a comment, an error-looking text."""

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({"id": "c", "model": "m", "choices": [choice], **extra}).encode() + b"\n\n"

    texts = ["Hi", ' "finish_reason":"stop"', " [DONE] ", ' "error": no', " []", " message_stop", " ok"]
    body = event({"role": "assistant", "content": ""}) + b": keep-alive\n\n"
    body += b"".join(event({"content": text}) for text in texts)
    body += event({}, "stop") + event({}, None, usage={"prompt_tokens": 3, "completion_tokens": 7})
    return body.replace(
        b'"choices": [{"index": 0, "delta": {}, "finish_reason": null}], "usage"', b'"choices": [], "usage"'
    )


def responses_stream() -> bytes:
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r1", "status": "in_progress"}}
    item = {"type": "message", "id": "m1", "role": "assistant", "content": []}
    done = {
        "type": "response.completed",
        "sequence_number": 9,
        "response": {"id": "r1", "status": "completed", "usage": {"input_tokens": 5, "output_tokens": 4}},
    }
    body = named("response.created", created)
    body += named("response.output_item.added", {"type": "response.output_item.added", "item": item})
    for i, text in enumerate(["Say", " hi", " to", " response.completed"]):
        delta = {"type": "response.output_text.delta", "item_id": "m1", "delta": text, "sequence_number": i + 2}
        body += named("response.output_text.delta", delta)
    return body + named("response.completed", done)


def messages_stream() -> bytes:
    start = {
        "type": "message_start",
        "message": {"id": "msg_1", "model": "claude", "stop_reason": None, "usage": {"input_tokens": 12}},
    }

    def delta(text: str) -> bytes:
        payload = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        return named("content_block_delta", payload)

    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    body = named("message_start", start) + named("ping", {"type": "ping"}) + named("content_block_start", block)
    body += b"".join(delta(text) for text in ["Hello", ' "stop_reason": "x"', " there", " message_stop"])
    body += named("content_block_stop", {"type": "content_block_stop", "index": 0})
    end = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 15}}
    return body + named("message_delta", end) + named("message_stop", {"type": "message_stop"})


STREAMS: dict[str, tuple[str, bytes]] = {
    "bench chat": ("chat", b"".join(stream_chunks())),
    "openai padded chat": ("chat", b"".join(openai_stream_chunks())),
    "openai fixture": ("chat", (FIXTURES / "chat_stream.sse").read_bytes()),
    "openai fixture, usage": ("chat", (FIXTURES / "chat_stream_include_usage.sse").read_bytes()),
    "chat, spaced json": ("chat", chat_spaced()),
    "responses": ("responses", responses_stream()),
    "messages": ("messages", messages_stream()),
}


def by_events(body: bytes) -> list[bytes]:
    """The stream one event a chunk (as providers flush it)."""
    return [part + b"\n\n" for part in body.split(b"\n\n") if part]


def cut_randomly(body: bytes, rng: random.Random) -> list[bytes]:
    """The stream in random pieces: mostly whole events, some joined, some cut mid-event."""
    events = by_events(body)
    pieces: list[bytes] = []
    at = 0
    while at < len(events):
        kind = rng.random()
        if kind < 0.6:
            pieces.append(events[at])
            at += 1
        elif kind < 0.8:
            take = rng.randint(2, 4)
            pieces.append(b"".join(events[at : at + take]))
            at += take
        else:
            event = events[at]
            cut = rng.randint(1, len(event) - 1)
            pieces += [event[:cut], event[cut:]]
            at += 1
    return pieces


def cuttings(body: bytes, count: int, seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    return [by_events(body)] + [cut_randomly(body, rng) for _ in range(count)]


# -- The scans -------------------------------------------------------------------------------------------

VOCABULARY = [
    b'"finish_reason"',
    b'finish_reason"',
    b"finish_reason",
    b":null",
    b": null",
    b":",
    b'"',
    b" ",
    b"\n",
    b"\t",
    b'"stop"',
    b': "',
    b"f",
    b"[DONE]",
    b"[DONE",
    b'"message_stop"',
    b'"stop_reason"',
    b'"error"',
    b"[]",
    b'"response.completed"',
    b'"response.failed"',
    b'"response.',
    b"x",
]


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_the_scans_answer_as_the_former_ones_on_any_bytes(api: str) -> None:
    dialect = dialect_for(api)  # type: ignore[arg-type]
    rng = random.Random(41)
    samples = [b"".join(rng.choice(VOCABULARY) for _ in range(rng.randint(0, 12))) for _ in range(20_000)]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))) for _ in range(2_000)]
    for _, body in STREAMS.values():
        samples += by_events(body)
    finishes = ends = 0
    for data in samples:
        assert dialect.may_end(data) == old_may_end(api, data), data
        assert dialect.may_finish(data) == old_may_finish(api, data), data
        if dialect.end_mark is not None:
            assert (data.find(dialect.end_mark) >= 0) == old_may_end(api, data), data
        finishes += dialect.may_finish(data)
        ends += dialect.may_end(data)
    assert finishes > 20 and ends > 20  # both answers were met


# -- The meter -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def watch(pieces: list[bytes], dialect: Dialect | OldScans, counter: TokenCounter) -> tuple[list[Any], Reading]:
    """Feed the pieces one per clock tick; what the meter says after each, and its reading."""
    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT, dialect)  # type: ignore[arg-type]
    seen = []
    for tick, piece in enumerate(pieces, 1):
        clock.now = SENT_AT + tick
        meter.feed(piece)
        seen.append(
            (
                meter.done,
                meter.finish_arrived,
                meter.first_output_at,
                meter.received_bytes,
                meter.malformed,
                meter.finish_seen,
                meter.first_error,
                meter.response_id,
            )
        )
    meter.end_of_stream()
    return seen, meter.finish(counter)


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_meter_reads_every_cutting_as_with_the_former_scans(name: str, counter: TokenCounter) -> None:
    api, body = STREAMS[name]
    finished = 0
    for pieces in cuttings(body, 60, seed=len(name)):
        assert b"".join(pieces) == body
        now, reading = watch(pieces, dialect_for(api), counter)  # type: ignore[arg-type]
        before, former = watch(pieces, OldScans(api), counter)
        assert now == before
        assert reading == former
        finished += reading.finished
    assert finished  # the streams were read to their finish


# -- The forwarder ---------------------------------------------------------------------------------------


def error_stream() -> bytes:
    body = b"".join(stream_chunks()[:6])
    return body + b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n' + b"data: [DONE]\n\n"


FORWARDED = {**STREAMS, "chat with an error": ("chat", error_stream())}


@pytest.mark.parametrize("name", list(FORWARDED))
@pytest.mark.parametrize(
    "options",
    [{}, {"drop_usage_only": True}, {"continuation": True}, {"continuation": True, "said_tokens": 9}],
    ids=["plain", "drop usage", "continuation", "continuation with said tokens"],
)
def test_the_forwarder_sends_every_cutting_as_before(name: str, options: dict[str, Any]) -> None:
    api, body = FORWARDED[name]
    dialect = dialect_for(api)  # type: ignore[arg-type]
    for pieces in cuttings(body, 40, seed=len(name) + 7):
        now, before = EventForwarder(dialect, **options), OldForwarder(dialect, **options)
        for piece in pieces:
            assert now.feed(piece) == before.feed(piece)
            assert (now.error, now.error_object) == (before.error, before.error_object)
        assert now.flush() == before.flush()
