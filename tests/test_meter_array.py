"""The meter's batch read joins kept chunks into one JSON array without splitting them: the same bytes, and the
same arrival per event, as splitting every chunk into its events would give, however the stream was cut."""

from __future__ import annotations

import itertools

import pytest

from gateway.meter import StreamMeter

HEAD = '{"id":"c","object":"chat.completion.chunk","choices":['
EVENTS = [
    HEAD + '{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
    *(HEAD + f'{{"index":0,"delta":{{"content":" w{i}"}},"finish_reason":null}}]}}' for i in range(9)),
    HEAD + '{"index":0,"delta":{},"finish_reason":"stop"}]}',
    '{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}',
]
STREAM = b"".join(f"data: {e}\n\n".encode() for e in EVENTS) + b"data: [DONE]\n\n"


class _NoFold(StreamMeter):
    fold_at = 10**9


def _cut(sizes: list[int]) -> list[bytes]:
    """The stream in chunks of ``sizes`` events each (the rest in the last)."""
    events = [e + b"\n\n" for e in STREAM.split(b"\n\n")[:-1]]
    chunks: list[bytes] = []
    at = 0
    for size in itertools.cycle(sizes):
        if at >= len(events):
            return chunks
        chunks.append(b"".join(events[at : at + size]))
        at += size
    raise AssertionError("unreachable")


@pytest.mark.parametrize("sizes", [[1], [2], [3], [1, 2], [2, 1, 3], [5], [len(EVENTS) + 1]])
def test_the_joined_array_is_the_split_events(sizes: list[int]) -> None:
    ticks = iter(range(1, 1000))
    meter = _NoFold(lambda: float(next(ticks)), 0.0)
    for chunk in _cut(sizes):
        meter.feed(chunk)
    assert meter.done
    array, times = meter._array(meter._events)
    split = list(meter._timed_events(meter._events))
    assert array == b"[" + b",".join(data for _, data in split) + b"]"
    assert times == [at for at, _ in split]
    assert len(times) == len(EVENTS)
