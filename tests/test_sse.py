"""The SSE splitter: events come out whole, whatever the byte boundaries of the input."""

from __future__ import annotations

import json

import pytest

from gateway.relay.forward import EventForwarder
from gateway.sse import MAX_EVENT_BYTES, EventTooLarge, SSESplitter, parse_event, whole_events

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\nid: 7\ndata: first line\ndata: second line\n\n"
    b"retry: 100\n\n"
    b"data:no-space\n\n"
    b'data: {"text": "caf\xc3\xa9 \xe2\x82\xac"}\r\n\r\n'
    b"data: cr only\r\r"
    b": comment inside\ndata: x\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    b'{"a": 1}',
    b"first line\nsecond line",
    b"no-space",
    b'{"text": "caf\xc3\xa9 \xe2\x82\xac"}',
    b"cr only",
    b"x",
    b"[DONE]",
]


def split_all(parts: list[bytes]) -> list[bytes]:
    splitter = SSESplitter()
    events: list[bytes] = []
    for part in parts:
        events.extend(splitter.feed(part))
    events.extend(splitter.flush())
    return events


def test_whole_stream_in_one_chunk() -> None:
    assert split_all([STREAM]) == EXPECTED


def test_byte_by_byte() -> None:
    assert split_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_every_single_split_point() -> None:
    for cut in range(len(STREAM) + 1):
        assert split_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_every_pair_of_split_points() -> None:
    for first in range(0, len(STREAM) + 1, 3):
        for second in range(first, len(STREAM) + 1):
            parts = [STREAM[:first], STREAM[first:second], STREAM[second:]]
            assert split_all(parts) == EXPECTED, (first, second)


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline: bytes) -> None:
    stream = newline.join([b"data: one", b"data: two", b"", b"data: three", b"", b""])
    for cut in range(len(stream) + 1):
        assert split_all([stream[:cut], stream[cut:]]) == [b"one\ntwo", b"three"], cut


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_a_long_event_held_in_pieces_ends_where_it_ends(newline: bytes, size: int) -> None:
    # Pieces of an event with no line end in them are held as they came (``SSESplitter._more``), not copied onto the
    # event so far; the blank line that ends it may fall in a piece or across the seam of two.
    stream = newline.join([b"data: " + b"x" * 40, b"data: y", b"", b": c", b"", b"data: z", b"", b""])
    forwarder = EventForwarder()
    parts = [stream[i : i + size] for i in range(0, len(stream), size)]
    assert split_all(parts) == [b"x" * 40 + b"\ny", b"z"]
    assert b"".join(forwarder.feed(part) for part in parts) + forwarder.flush() == stream


@pytest.mark.parametrize("line_end", [b"", b"\n", b"\r", b"\r\n"])
def test_an_event_past_the_bound_is_refused_however_its_lines_end(line_end: bytes) -> None:
    # Each piece a line of one event (or a part of its only line): never a blank line, so the event never ends.
    piece = b"data: " + b"a" * (1 << 20) + line_end
    splitter = SSESplitter()
    with pytest.raises(EventTooLarge):
        for _ in range(MAX_EVENT_BYTES // len(piece) + 2):
            splitter.feed(piece)
    assert splitter.pending > MAX_EVENT_BYTES


def test_crlf_split_between_cr_and_lf_is_one_line_ending() -> None:
    splitter = SSESplitter()
    assert splitter.feed(b"data: a\r") == []
    assert splitter.feed(b"\n") == []
    assert splitter.feed(b"data: b\r\n\r") == []
    assert splitter.feed(b"\n") == [b"a\nb"]


def test_comments_and_fieldless_events_are_dropped() -> None:
    splitter = SSESplitter()
    assert splitter.feed(b": ping\n\n: ping\n\nevent: x\n\n") == []
    assert splitter.pending == 0


def test_flush_completes_an_event_without_its_blank_line() -> None:
    splitter = SSESplitter()
    assert splitter.feed(b'data: {"last": true}') == []
    assert splitter.pending == len(b'data: {"last": true}')
    assert splitter.flush() == [b'{"last": true}']
    assert splitter.flush() == []
    splitter.feed(b"data: half\r")
    assert splitter.flush() == [b"half"]


def test_pending_is_at_most_one_partial_event() -> None:
    splitter = SSESplitter()
    assert splitter.feed(b"data: 1\n\ndata: 2\n\ndata: 3") == [b"1", b"2"]
    assert splitter.pending == len(b"data: 3")


@pytest.mark.parametrize(
    "chunk",
    [
        b'data: {"a":1}\n\ndata: {"b":2}\n\n',
        b"data:  two spaces\n\n",
        b"data:no space\n\n",
        b'data: {"c":"data: inside"}\n\n',
        b"data: x\n\n\n\n",
        b": keep-alive\n\ndata: y\n\n",
        b"event: delta\ndata: z\n\n",
        b"data: a\ndata: b\n\n",
        b"data: crlf\r\n\r\ndata: w\n\n",
        b"\n\n",
    ],
)
def test_whole_events_reads_a_run_of_whole_events_as_a_splitter_does(chunk: bytes) -> None:
    assert whole_events(chunk) == SSESplitter().feed(chunk)


def _json_read(data: bytes) -> object:
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 1, "a": 2, "b": [1.5, -0.0, 5e-324, 123456789012345678901234567890]}',
        b'{"x": NaN, "y": Infinity}',
        b'{"big": 1e400}',
        b'{"s": "\\ud800"}',  # a lone surrogate escape
        b'{"s": "\\ud83d\\ude00"}',
        b'{"s": "\xed\xa0\x80"}',  # a surrogate encoded in the bytes
        b'{"s": "\xff"}',
        b'\xef\xbb\xbf{"a": 1}',
        '{"a": 1}'.encode("utf-16"),
        b' {"a": 1}\n',
        b'{"a": 1} x',
        b"[1]",
        b"1",
        b"",
        b"[DONE]",
    ],
)
def test_parse_event_reads_as_json_loads(data: bytes) -> None:
    assert parse_event(data) == _json_read(data)
