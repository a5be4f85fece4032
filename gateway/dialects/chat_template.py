"""The meter's read of a chat stream whose answer events are one shape: the same bytes around each ``content``.

A provider sends every answer event of a stream alike: ``data: {"id": …, "model": …, "choices":
[{"index": 0, "delta": {"content": "`` *text* ``"}, "finish_reason": null}]}``, only the text
changing. Decoding each of them into a ``ChatChunk`` (``chat_events``) was most of the cost of
``StreamMeter.finish``. Here the shape is taken from the meter's kept chunks: the longest run of
chunks kept without one head (``gateway.kept_chunks``: the beginning the stream's chunks share) is read when each of
them is the head, a text and one suffix, the head holding the ``"content":"`` key. Two events of
that shape are decoded whole, as before, and check it: they must differ in their ``delta.content``
alone, and say nothing else that counts (no error, usage, tool call, finish, timings, second
choice). They are the two entries just before the run when those are of the shape (a stream's
first answer events are kept before its head is learnt), else the run's first two. Every other
event of the run is decoded as its text alone (``"text"`` in the same JSON array as the other
events), and read as the event it stands for (``answered_texts``).

Exactness: a text is taken only when it is one whole JSON string's body in place (no unescaped
quote, no escape left open at its end; its escapes and UTF-8 are then msgspec's to read, as in the
whole event), so the event decodes to the checked shape with that string as its content. Anything
else (no shape, an event that fits no rule here, a stream not one ``data:`` line per event) returns
None and the stream is read as before (``ChatDialect.tally_array``, else over dicts).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.dialects.base import Tally
from gateway.dialects.chat_events import ChatChunk, answered_texts, read_end, reasoning_of, tally_chunks
from gateway.kept_chunks import KeptChunks

_CONTENT = b'"content":"'
_STRING_BODY = re.compile(rb'(?:[^"\\\n\r]|\\[^\n\r])*')
"""The body of one JSON string as it stands in an event: what a text may be (msgspec then reads its escapes)."""
_DECODER = msgspec.json.Decoder(list[ChatChunk | str])


def _plain(event: Any) -> bool:
    """``event`` says nothing but its one choice's ``delta.content``, read as ``tally_chunks`` reads its common
    chunk: no error, usage, Groq usage, timings, tool call, completion text, message or finish."""
    if not isinstance(event, ChatChunk) or event.error is not None or event.usage is not None:
        return False
    if event.x_groq is not None or event.timings is not None or event.metrics is not None:
        return False
    if event.perf_metrics is not None or event.choices is None or len(event.choices) != 1:
        return False
    choice = event.choices[0]
    delta = choice.delta
    if delta is None or not isinstance(delta.content, str):
        return False
    if delta.tool_calls is not None or delta.function_call is not None:
        return False
    return choice.text is None and choice.message is None and not choice.finish_reason


def _one_shape(first: Any, second: Any) -> bool:
    """Two decoded events of the run differ in their ``delta.content`` alone, and say nothing else that counts."""
    if not _plain(first) or not _plain(second):
        return False
    delta = second.choices[0].delta
    content = delta.content
    if content == first.choices[0].delta.content:
        return False  # the text may not be what the content is read from
    delta.content = first.choices[0].delta.content
    same = first == second
    delta.content = content
    return bool(same)


def _texts(pieces: list[bytes], lead: bytes) -> bytes | None:
    """``lead`` + each piece, joined as the bodies of consecutive JSON strings (``a","b","c``), when each is one
    string's whole body (no unescaped quote, no escape left open at its end); else None."""
    joined = lead + (b'","' + lead).join(pieces) if lead else b'","'.join(pieces)
    bare = joined
    if b"\\" in joined:
        bare = joined.replace(b"\\\\", b"")  # escaped backslashes: each backslash left escapes the byte after it
        if bare.endswith(b"\\") or b'\\","' in bare:
            return None  # a piece's last escape would take the quote that closes it
        bare = bare.replace(b'\\"', b"")
    return joined if bare.count(b'"') == 2 * (len(pieces) - 1) else None


def _datas(entries: KeptChunks, start: int, stop: int, parts: list[bytes], times: list[float]) -> bool:
    """Add entries ``start`` to ``stop`` to the array's ``parts`` as their events' data (each whole chunk one
    ``data: {`` line per event), their arrivals to ``times``; False when one is of another form."""
    indices, datas, heads, arrivals = entries.parts, entries.datas, entries.heads, entries.times
    for index in range(start, stop):
        data = datas[index]
        if index in indices:
            if not data.startswith(b"{"):
                return False  # may decode as a string: a text's place
            parts.append(data)
            times.append(arrivals[index])
            continue
        chunk = heads[index] + data
        if not chunk.startswith(b"data: {") or not chunk.endswith(b"\n\n") or b"\r" in chunk:
            return False
        lines = chunk.count(b"\n")
        if lines == 2:  # one event (its line and the blank one): the common chunk
            parts.append(chunk[6:-2])
            times.append(arrivals[index])
            continue
        between = chunk.count(b"\n\ndata: {")
        if lines != 2 * (between + 1) or chunk.count(b"\n\ndata: ") != between:
            return False
        parts.append(chunk[6:-2].replace(b"\n\ndata: ", b","))
        times += [arrivals[index]] * (between + 1)
    return True


def _shaped(entries: KeptChunks, index: int, prefix: bytes, suffix: bytes) -> bool:
    """Entry ``index`` is one event of the shape: ``prefix``, a string's body on one line, ``suffix`` (or, an entry
    that is one event's data, the same without ``data: `` and the blank line)."""
    data = entries.datas[index]
    if index in entries.parts:
        prefix, suffix = prefix[6:], suffix[:-2]
    else:
        data = entries.heads[index] + data
    if len(data) < len(prefix) + len(suffix) or not data.startswith(prefix) or not data.endswith(suffix):
        return False
    text = data[len(prefix) : len(data) - len(suffix)]
    return b"\n" not in text and _texts([text], b"") is not None


def tally_kept(entries: KeptChunks, into: Tally | None, timing_tail: int) -> Tally | None:
    """``ChatDialect.tally`` of the kept entries, on from ``into``, reading the answer events of the stream's
    shape as their text; None (``into`` untouched) when the entries do not fit this read (then they are read as
    before)."""
    heads, datas = entries.heads, entries.datas
    head = heads[len(heads) // 2] if heads else b""
    key = head.rfind(_CONTENT)
    if key < 0 or not head.startswith(b"data: {") or b"\n" in head or b"\r" in head:
        return None
    # The run kept without this head (``index`` and ``count``: C loops, the run is most of the stream).
    low = heads.index(head)
    count = heads.count(head)
    high = low + count
    if count < 4 or heads[low:high].count(head) != count:
        return None
    lead = head[key + len(_CONTENT) :]  # the texts' beginning, when they all begin alike
    first = lead + datas[low]
    body = _STRING_BODY.match(first)
    if body is None:  # pragma: no cover - the pattern matches the empty string
        return None
    suffix = first[body.end() :]
    if not suffix.startswith(b'"') or not suffix.endswith(b"\n\n") or suffix.count(b"\n") != 2:
        return None
    pieces = b"".join(datas[low:high]).split(suffix)
    # One suffix per chunk, at its end: each chunk ends with a blank line, and the suffix holds the only one of the
    # event (a piece that held another newline fails the decode: a text holds no raw newline).
    if len(pieces) != count + 1 or pieces.pop() or b"\r" in suffix:
        return None
    texts = _texts(pieces, lead)
    if texts is None:
        return None
    # The shape's check: two events of it decoded whole, just before the texts. The two entries before the run
    # when they are of the shape (a stream's first answer events, kept before its head was learnt), else the
    # run's first two.
    prefix = head[: key + len(_CONTENT)]
    whole = (
        0 if low >= 2 and _shaped(entries, low - 2, prefix, suffix) and _shaped(entries, low - 1, prefix, suffix) else 2
    )
    if whole:
        texts = texts[2 * len(lead) + len(pieces[0]) + len(pieces[1]) + 6 :]
    parts: list[bytes] = []
    times: list[float] = []
    if not _datas(entries, 0, low + whole, parts, times):
        return None
    start = len(times)  # the run's texts, after the two events decoded whole
    parts.append(b'"' + texts + b'"')
    times += entries.times[low + whole : high]
    stop = len(times)
    if not _datas(entries, high, len(datas), parts, times):
        return None
    try:
        events: list[Any] = _DECODER.decode(b"[" + b",".join(parts) + b"]")
    except msgspec.MsgspecError:
        return None
    if len(events) != len(times) or not _one_shape(events[start - 2], events[start - 1]):
        return None
    shape = events[start - 1]
    model = shape.model if isinstance(shape.model, str) else None
    tally = into if into is not None else Tally()
    tally_chunks(events[:start], times[:start], 0, tally)
    block = events[start:stop]
    if "" in block:
        tally_chunks(block, times[start:stop], 0, tally, model, bool(reasoning_of(shape.choices[0].delta)))
    elif block:
        answered_texts(tally, block, times[start:stop], model)
    tally_chunks(events[stop:], times[stop:], 0, tally)
    if timing_tail:
        read_end(tally, events[-timing_tail:])
    return tally
