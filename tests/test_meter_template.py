"""The meter's read of answer events of one shape as their text (``gateway.dialects.chat_template``) against the
read it stands in for (the typed read of every event, else over dicts).

Every stream is metered twice, by the meter as it is and by one whose dialect has no ``tally_kept`` (the read as
it was before), and the readings must be equal: exact token counts, text, times, usage, finish, errors. The
streams mix answer events of one shape (texts with multi-byte UTF-8, escapes, quotes, backslashes, empty ones)
with the events that break the shape (role, reasoning, tool calls, finish, usage, errors, events that are not JSON,
keep-alives, ``\\r\\n``), cut into chunks one event each, several events each and at random bytes; read whole and
in batches (folds).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from gateway.dialects import CHAT
from gateway.dialects.base import Tally
from gateway.dialects.chat import ChatDialect
from gateway.dialects.chat_template import _texts, tally_kept
from gateway.kept_chunks import KeptChunks
from gateway.meter import FOLD_KEEP, StreamMeter
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock

TEXTS = [
    " word",
    " ünï",
    "日本語",
    "😀",
    "",
    "a\nb",
    'say "hi"',
    "back\\",
    "\\",
    "\\\\",
    'q"',
    "\t tab",
    "é",
    "<|endoftext|>",
    " 12345",
    "x" * 40,
]


class BeforeDialect(ChatDialect):
    """Chat as it was read before the template read: every event decoded."""

    def tally_kept(self, entries: KeptChunks, into: Tally | None = None, final: bool = True) -> Tally | None:
        return None


BEFORE = BeforeDialect("chat")


class EagerMeter(StreamMeter):
    __slots__ = ()
    fold_at = FOLD_KEEP + 3


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def dumps(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":")).encode()


def shape(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A provider's event around its delta: (event, choice, delta) to fill with a content."""
    event: dict[str, Any] = {"id": f"chatcmpl-{rng.randint(0, 99)}", "object": "chat.completion.chunk"}
    if rng.random() < 0.8:
        event["created"] = 1
        event["model"] = rng.choice(["up-model", "m", 4, None])
    if rng.random() < 0.3:
        event["system_fingerprint"] = "fp_1"
    choice: dict[str, Any] = {"index": 0}
    delta: dict[str, Any] = {}
    if rng.random() < 0.2:
        delta["reasoning_content"] = rng.choice([None, " think"])
    if rng.random() < 0.1:
        delta["tool_calls"] = None
    if rng.random() < 0.1:
        choice["finish_reason"] = rng.choice([None, "stop"])  # "stop" in every event: no template
    if rng.random() < 0.05:
        event["usage"] = None
    if rng.random() < 0.05:
        event["timings"] = {"predicted_ms": 1.5}
    return event, choice, delta


def answer_event(base: tuple[dict[str, Any], dict[str, Any], dict[str, Any]], text: Any, ascii_only: bool) -> bytes:
    event, choice, delta = (dict(part) for part in base)
    delta["content"] = text
    choice["delta"] = delta
    choice.setdefault("finish_reason", None)
    event["choices"] = [choice]
    return b"data: " + dumps(event, ascii_only) + b"\n\n"


def other_event(rng: random.Random, ascii_only: bool) -> bytes:
    kind = rng.randrange(11)
    if kind == 0:
        return b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    if kind == 1:
        return b'data: {"choices":[{"index":0,"delta":{"reasoning_content":" hm"}}]}\n\n'
    if kind == 2:
        call = {"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a":'}}
        return b"data: " + dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}, ascii_only) + b"\n\n"
    if kind == 3:
        return b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    if kind == 4:
        return b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":32}}\n\n'
    if kind == 5:
        return b'data: {"error":{"message":"boom","code":"x"}}\n\n'
    if kind == 6:
        return b"data: not json\n\n"
    if kind == 7:
        return b": keep-alive\n\n"
    if kind == 8:
        return b'data: {"choices":[{"delta":{"content":["list"]}}]}\n\n'
    if kind == 9:
        return b'data: "a string"\n\n'
    return b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\r\n\r\n'


def random_stream(rng: random.Random) -> list[bytes]:
    """Events, each whole: mostly answer events of one or two shapes, some others."""
    ascii_only = rng.random() < 0.5
    shapes = [shape(rng), shape(rng)]
    events = []
    if rng.random() < 0.7:
        events.append(other_event(rng, ascii_only) if rng.random() < 0.2 else answer_event(shapes[0], "", ascii_only))
    odd = rng.choice([0.0, 0.0, 0.02, 0.1, 0.3])
    if rng.random() < 0.5:
        # Two texts that begin unalike: the head is the shape's prefix from the start, and its run the longest.
        events += [answer_event(shapes[0], text, ascii_only) for text in ("A", "B", "C")]
    for _ in range(rng.randint(0, 60)):
        if rng.random() < odd:
            events.append(other_event(rng, ascii_only))
        else:
            base = shapes[0] if rng.random() < 0.9 else shapes[1]
            events.append(answer_event(base, rng.choice(TEXTS), ascii_only))
    if rng.random() < 0.8:
        events.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    if rng.random() < 0.5:
        events.append(b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":32}}\n\n')
    if rng.random() < 0.8:
        events.append(b"data: [DONE]\n\n")
    return events


def chunked(rng: random.Random, events: list[bytes]) -> list[bytes]:
    how = rng.random()
    if how < 0.7:
        return events  # one event a chunk, as providers flush
    stream = b"".join(events)
    if how < 0.8:
        chunks, at = [], 0
        while at < len(events):
            step = rng.randint(1, 3)
            chunks.append(b"".join(events[at : at + step]))
            at += step
        return chunks
    points = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(1, 40)))) if stream else []
    edges = [0, *points, len(stream)]
    return [stream[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


def read(meter_class: type[StreamMeter], dialect: ChatDialect, chunks: list[bytes], counter: TokenCounter) -> Any:
    clock = FakeClock(10.0)
    meter = meter_class(clock, 10.0, dialect)
    for chunk in chunks:
        clock.now += 0.125
        meter.feed(chunk)
    meter.end_of_stream()
    return meter.finish(counter), meter.done, meter.malformed


def test_every_stream_reads_as_it_did_before(counter: TokenCounter) -> None:
    rng = random.Random(41)
    taken = 0
    for _ in range(1500):
        chunks = chunked(rng, random_stream(rng))
        for meter_class in (StreamMeter, EagerMeter):
            assert read(meter_class, CHAT, chunks, counter) == read(meter_class, BEFORE, chunks, counter), chunks
        meter = StreamMeter(FakeClock(), 0.0)
        for chunk in chunks:
            meter.feed(chunk)
        taken += tally_kept(meter._events, None, 3) is not None
    assert taken > 50  # the template read is exercised, not only its refusals


def stream_of(texts: list[str], tail: bool = True) -> list[bytes]:
    head = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"fake-model","choices":['
    events = [head + '{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}']
    events += [head + '{"index":0,"delta":{"content":' + json.dumps(t) + '},"finish_reason":null}]}' for t in texts]
    if tail:
        events.append(head + '{"index":0,"delta":{},"finish_reason":"stop"}]}')
        events.append(head[: -len('"choices":[')] + '"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":32}}')
    return [f"data: {e}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


@pytest.mark.parametrize(
    "texts",
    [
        [f" word{i}" for i in range(32)],
        ["日", "本", "語", "😀", " ü", "n", "ï"],  # multi-byte characters, one a chunk
        ["a\\", "\\", 'b"', '"', "\n", "\\n", "\u2028", "é"],  # escapes at a text's edges
        ["", "", " a", "", " b"],  # empty texts among the others
        ["<|endoftext|>", " the", " end"],
        [],
    ],
)
def test_a_plain_answer_is_read_as_texts_and_reads_as_before(texts: list[str], counter: TokenCounter) -> None:
    chunks = stream_of(texts)
    new, old = read(StreamMeter, CHAT, chunks, counter), read(StreamMeter, BEFORE, chunks, counter)
    assert new == old
    reading = new[0]
    assert reading.answer_text == "".join(texts)
    assert reading.output_tokens == counter.count("".join(texts))
    assert reading.usage_completion_tokens == 32 and reading.finished and reading.response_model == "fake-model"
    meter = StreamMeter(FakeClock(), 0.0)
    for chunk in chunks:
        meter.feed(chunk)
    if len(texts) == 32:  # the others are too short, or their texts begin alike (a run breaks where the head does)
        assert tally_kept(meter._events, None, 3) is not None


@pytest.mark.parametrize(
    ("event", "taken"),
    [
        ('{"model":"m","choices":[{"index":0,"delta":{"content":TEXT},"finish_reason":null}]}', True),
        ('{"choices":[{"delta":{"content":TEXT,"reasoning":"r"}}]}', True),  # empty texts carry output
        ('{"choices":[{"delta":{"content":TEXT,"content":"y"}}]}', False),  # the text is not the content
        ('{"choices":[{"delta":{"content":TEXT}},{"delta":{"content":"y"}}]}', False),  # two choices
        ('{"choices":[{"delta":{"content":TEXT},"finish_reason":"stop"}]}', False),  # a finish
        ('{"choices":[{"delta":{"content":TEXT,"tool_calls":[]}}]}', False),  # a tool call list
        ('{"usage":{"prompt_tokens":1},"choices":[{"delta":{"content":TEXT}}]}', False),  # usage
        ('{"error":{"message":"e"},"choices":[{"delta":{"content":TEXT}}]}', False),  # an error
        ('{"choices":[{"delta":{"content":TEXT}}],"timings":{"a":1}}', False),  # timings
        ('{"choices":[{"message":{"content":TEXT}}]}', False),  # not a delta
    ],
)
def test_the_shape_is_checked_on_the_runs_first_two_events(event: str, taken: bool, counter: TokenCounter) -> None:
    texts = [" a", " b", "", " c", " d", "", " e"]
    events = [f"data: {event.replace('TEXT', json.dumps(text))}\n\n".encode() for text in texts]
    events.append(b"data: [DONE]\n\n")
    assert read(StreamMeter, CHAT, events, counter) == read(StreamMeter, BEFORE, events, counter)
    meter = StreamMeter(FakeClock(), 0.0)
    for chunk in events:
        meter.feed(chunk)
    assert (tally_kept(meter._events, None, 3) is not None) == taken


RAW = [
    b"a",
    b" w",
    b"\\",
    b'"',
    b'","',
    b',"',
    b'\\"',
    b"\\\\",
    b"\\n",
    b"\\u00e9",
    b"\\ud800",
    "é".encode(),
    b"\x01",
    b"]",
    b"}",
]
"""Bytes of a text as they stand between the quotes, valid or not: a stream may hold events that are not JSON."""


def test_texts_that_are_no_string_bodies_read_as_before(counter: TokenCounter) -> None:
    """Events cut from the shape's bytes around any bytes, JSON or not: whatever a text does to the quotes (closes
    its string early, escapes the closing quote, opens another), the reading is the one before."""
    rng = random.Random(7)
    prefix = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"'
    suffix = b'"},"finish_reason":null}]}\n\n'
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":" a"},"finish_reason":null}]}\n\n'
    taken = 0
    for _ in range(3000):
        events = [role]
        for _ in range(rng.randint(2, 8)):
            text = b"".join(rng.choice(RAW[:2] * 6 + RAW) for _ in range(rng.randint(0, 3)))
            events.append(prefix + text + suffix)
        events.append(b"data: [DONE]\n\n")
        assert read(StreamMeter, CHAT, events, counter) == read(StreamMeter, BEFORE, events, counter), events
        meter = StreamMeter(FakeClock(), 0.0)
        for chunk in events:
            meter.feed(chunk)
        taken += tally_kept(meter._events, None, 3) is not None
    assert taken > 100


@pytest.mark.parametrize(
    "texts",
    [
        [
            b"x",
            b"w",
            b"v",
            b"u",
            b"a\\",
            b',"b',
            b"y",
        ],  # an escape takes the closing quote
        [b"x", b"w", b"v", b"u", b'a","b', b"y\\", b"z"],
        [b"x", b"w", b"v", b"u", b"a\\\\\\", b',"b', b"y"],  # three backslashes: the last one escapes
        [b"x", b"w", b"v", b"u", b'a\\\\","b', b"y\\\\", b"z"],
        [b"x", b"w", b"v", b"u", b"y", b"a\\"],  # the last text's escape left open
        [b"x", b"w", b"v", b"u", b'a\\"', b"b"],  # an escaped quote: a string's body
    ],
)
def test_texts_that_move_the_quotes_read_as_before(texts: list[bytes], counter: TokenCounter) -> None:
    prefix = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"'
    suffix = b'"},"finish_reason":null}]}\n\n'
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":" a"},"finish_reason":null}]}\n\n'
    events = [role, *(prefix + text + suffix for text in texts), b"data: [DONE]\n\n"]
    assert read(StreamMeter, CHAT, events, counter) == read(StreamMeter, BEFORE, events, counter)


def test_texts_are_taken_only_when_each_is_one_string_body() -> None:
    """``_texts`` against its definition: each ``lead`` + piece is a JSON string's body as far as quotes and
    escapes go (every quote escaped, no escape left open at its end); msgspec reads the rest."""
    body = re.compile(rb'(?:[^"\\]|\\.)*', re.DOTALL)
    rng = random.Random(3)
    for _ in range(20000):
        lead = b"".join(rng.choice(RAW[:4]) for _ in range(rng.randint(0, 1)))
        pieces = [b"".join(rng.choice(RAW) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 4))]
        expected = all(body.fullmatch(lead + piece) for piece in pieces)
        joined = _texts(pieces, lead)
        assert (joined is not None) == expected, (lead, pieces)
        assert joined is None or joined == b'","'.join(lead + piece for piece in pieces)
