"""The meter's read before a stream's first token, held to the former code on every cutting and on odd first events.

``StreamMeter.feed`` notes a chunk that is one event of one ``data: `` line, after at most one other line (what
providers send before their first token: chat's ``data:``, Responses' and Messages' ``event:`` then ``data:``)
without the splitter's cut, and ``_note`` keeps an event's data without ``KeptChunks.append``'s call. The former
``feed``, ``_until_output`` and ``_note`` are copied here (``FormerMeter``); both meters are fed the same pieces and
must agree after every one on everything a meter holds or says (its flags, its kept entries, its splitter's pending
bytes) and on the finish's ``Reading``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from gateway.dialects import dialect_for
from gateway.meter import StreamMeter
from gateway.reading import Reading
from gateway.sse import data_of, parse_event
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock
from tests.test_chunk_path import STREAMS, by_events, cuttings

SENT_AT = 100.0


class FormerMeter(StreamMeter):
    """The meter with its former ``feed`` (before the first output), ``_until_output`` and ``_note``, as copied."""

    __slots__ = ()

    def feed(self, chunk: bytes) -> None:
        now = self._clock()
        self.received_bytes += len(chunk)
        if self.first_output_at is None:
            if self._splitter.buffer or b"\r" in chunk:
                for data in self._splitter.feed(chunk):
                    self._note(now, data)
                return
            chunk = self._until_output(now, chunk)
            if not chunk:
                return
            if self.first_output_at is None:
                self._splitter.feed(chunk)
                return
        # After the first output the two meters run the same code: the rest of ``StreamMeter.feed``, unchanged.
        self.received_bytes -= len(chunk)  # counted above; ``StreamMeter.feed`` counts it again
        first_output_at = self.first_output_at
        StreamMeter.feed(self, chunk)
        assert self.first_output_at == first_output_at

    def _until_output(self, now: float, chunk: bytes) -> bytes:
        start = 0
        while self.first_output_at is None:
            end = chunk.find(b"\n\n", start)
            if end < 0:
                break
            data = data_of(chunk[start:end])
            start = end + 2
            if data is not None:
                self._note(now, data)
        return chunk[start:] if start else chunk

    def _note(self, now: float, data: bytes) -> None:
        dialect = self._dialect
        if data == dialect.done_data:
            self.done = True
            return
        self._events.append(now, data, False)
        if not self.finish_arrived and dialect.may_finish(data):
            self.finish_arrived = True
        if len(self._events) >= self.fold_at:
            self._fold()
        ends = dialect.done_data is None and dialect.may_end(data)
        if self.first_output_at is not None and not ends:
            return
        event = parse_event(data)
        if event is None:
            if self.first_output_at is None:
                self.malformed = True
            return
        if ends and dialect.is_terminal(event):
            self.done = True
        if self.first_output_at is not None:
            return
        look = dialect.first_look(event)
        if look.response_id is not None:
            self.response_id = look.response_id
        if look.kind == "output":
            self.first_output_at = now
        elif look.kind == "error":
            self.first_output_at = now
            self.first_error = look.error
        elif look.kind == "finish":
            self.finish_seen = True


class SmallFolds(StreamMeter):
    __slots__ = ()
    fold_at = 3


class FormerSmallFolds(FormerMeter):
    __slots__ = ()
    fold_at = 3


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def state(meter: StreamMeter) -> tuple[Any, ...]:
    """Everything the meter holds or says between chunks."""
    kept = meter._events
    return (
        meter.done,
        meter.finish_arrived,
        meter.first_output_at,
        meter.received_bytes,
        meter.malformed,
        meter.finish_seen,
        repr(meter.first_error),
        meter.response_id,
        meter._splitter.buffer,
        list(kept.times),
        kept.datas,
        kept.heads,
        kept.parts,
        kept.head,
        kept._first,
        meter._tally,
    )


def watch(meter_type: type[StreamMeter], api: str, pieces: list[bytes], counter: TokenCounter) -> list[Any]:
    """The meter's state after each piece (one clock tick each), after the stream's end, and its reading."""
    clock = FakeClock(SENT_AT)
    meter = meter_type(clock, SENT_AT, dialect_for(api))  # type: ignore[arg-type]
    seen: list[Any] = []
    for tick, piece in enumerate(pieces, 1):
        clock.now = SENT_AT + tick
        meter.feed(piece)
        seen.append(state(meter))
    clock.now += 1
    meter.end_of_stream()
    seen.append(state(meter))
    reading: Reading = meter.finish(counter)
    seen.append(reading)
    return seen


@pytest.mark.parametrize("name", list(STREAMS))
def test_every_cutting_of_the_known_streams_is_read_as_before(name: str, counter: TokenCounter) -> None:
    api, body = STREAMS[name]
    outputs = 0
    for pieces in cuttings(body, 60, seed=len(name) + 7):
        now = watch(StreamMeter, api, pieces, counter)
        assert now == watch(FormerMeter, api, pieces, counter)
        outputs += now[-1].ttft_s is not None
    assert outputs  # the first token was found


def chat(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


ROLE = chat(
    {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
)
TEXT = chat({"id": "c", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]})
DATAS = [
    ROLE,
    TEXT,
    chat({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    chat({"error": {"message": "overloaded", "type": "server_error"}}),
    chat({"error": {"message": "too long", "code": "context_length_exceeded"}}),
    chat({"error": None, "choices": [{"delta": {"content": "x"}}]}),
    chat({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]}),
    chat({"choices": [{"delta": {"reasoning_content": "hm"}}]}),
    chat({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}),
    chat({"choices": "no"}),
    chat([1, 2]),
    chat({"type": "response.created", "response": {"id": "r9"}}),
    chat({"type": "response.output_text.delta", "delta": "x"}),
    chat({"type": "response.completed", "response": {"id": "r9", "status": "completed"}}),
    chat({"type": "message_start", "message": {"id": "m"}}),
    chat({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}),
    chat({"type": "message_stop"}),
    chat({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
    chat({"type": "response.failed", "response": {"id": "r9", "error": {"code": "server_error", "message": "x"}}}),
    b'{"choices":[{"delta":{"content":"x"}}],"n":NaN}',
    b'{"choices":[{"delta":{"content":"\xff"}}]}',
    b'{"choices":[{"delta":{"content":"\\ud800"}}]}',
    b'{"choices":[{"delta":{"content":"a"}}],"choices":[]}',
    b'{"choices":[{"delta":{"content":"a"',
    b'{"finish_reason":"stop"} [DONE]',
    b"[DONE]",
    b"",
    b"not json",
]
"""Event data a stream may begin with: the usual, errors, finishes, other APIs' events, and what is not JSON."""
FRAMES: list[Callable[[bytes], bytes]] = [
    lambda d: b"data: " + d + b"\n\n",
    lambda d: b"data:" + d + b"\n\n",
    lambda d: b"data:  " + d + b"\n\n",
    lambda d: b"data: " + d + b"\r\n\r\n",
    lambda d: b"event: x\ndata: " + d + b"\n\n",
    lambda d: b"event: x\ndata:" + d + b"\n\n",
    lambda d: b"event: x\ndata: " + d + b"\ndata: " + d + b"\n\n",
    lambda d: b"id: 7\ndata: " + d + b"\n\n",
    lambda d: b"\ndata: " + d + b"\n\n",
    lambda d: b"event: x\r\ndata: " + d + b"\n\n",
    lambda d: b"event: x\n\ndata: " + d + b"\n\n",
    lambda d: b"event: x\ndata: " + d + b"\n",
    lambda d: b"data: " + d + b"\ndata: " + d + b"\n\n",
    lambda d: b"data: " + d + b"\nid: 1\n\n",
    lambda d: b"data: " + d + b"\rid: 1\n\n",
    lambda d: b"data: " + d + b"\r\n\n",
    lambda d: b": comment\n\ndata: " + d + b"\n\n",
    lambda d: b"data: " + d + b"\n\n\n",
    lambda d: b"data: " + d.replace(b":", b":\n", 1) + b"\n\n",
    lambda d: b"dat: " + d + b"\n\n",
]
"""How an event may be framed: one ``data: `` line (the fast path), and every other way the splitter reads."""


def random_stream(rng: random.Random) -> list[bytes]:
    """A few random first events, mostly one ``data: `` line, then an answer; cut at random, or one event a piece."""
    events = []
    for _ in range(rng.randint(1, 6)):
        frame = FRAMES[0] if rng.random() < 0.5 else rng.choice(FRAMES)
        events.append(frame(rng.choice(DATAS)))
    events += [b"data: " + TEXT + b"\n\n", b"data: " + ROLE + b"\n\n", b"data: [DONE]\n\n"]
    body = b"".join(events)
    if rng.random() < 0.4:
        return events
    cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(0, 8))))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_random_and_odd_first_events_are_read_as_before(api: str, counter: TokenCounter) -> None:
    rng = random.Random(4100 + len(api))
    kinds = {"output": 0, "error": 0, "malformed": 0, "done": 0, "folded": 0}
    for round_ in range(2_000):
        pieces = random_stream(rng)
        small = round_ % 5 == 0
        now = watch(SmallFolds if small else StreamMeter, api, pieces, counter)
        assert now == watch(FormerSmallFolds if small else FormerMeter, api, pieces, counter), pieces
        last = now[-3]
        kinds["output"] += last[2] is not None
        kinds["error"] += last[6] != "None"
        kinds["malformed"] += last[4]
        kinds["done"] += last[0]
        kinds["folded"] += last[15] is not None
    assert all(kinds.values()), kinds  # each way a stream's start can go was met


def test_the_fast_path_is_the_one_taken_by_one_data_line_chunks() -> None:
    """A chunk of one event (a ``data: `` line, or an ``event:`` line and one) before the first token is noted
    without the splitter (which ``feed``'s fast path does not call: a splitter that raises shows it), and a chunk of
    any other framing still goes through it."""

    class Refusing:
        buffer = b""

        def feed(self, chunk: bytes) -> list[bytes]:
            raise AssertionError("split")

    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT)
    meter._splitter = Refusing()  # type: ignore[assignment]
    meter.feed(b"data: " + ROLE + b"\n\n")
    meter.feed(b"data: " + TEXT + b"\n\n")
    assert meter.first_output_at == SENT_AT
    named = StreamMeter(clock, SENT_AT, dialect_for("messages"))
    named._splitter = Refusing()  # type: ignore[assignment]
    named.feed(b'event: message_start\ndata: {"type":"message_start","message":{"id":"m"}}\n\n')
    named.feed(
        b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}\n\n'
    )
    assert named.first_output_at == SENT_AT
    other = StreamMeter(clock, SENT_AT)
    other._splitter = Refusing()  # type: ignore[assignment]
    with pytest.raises(AssertionError, match="split"):
        other.feed(b"data: " + ROLE + b"\r\n\r\n")
    assert by_events(b"data: " + ROLE + b"\n\n") == [b"data: " + ROLE + b"\n\n"]
