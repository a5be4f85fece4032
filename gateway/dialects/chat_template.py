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

OpenAI pads every chunk with an ``obfuscation`` string, its last field, of a length and bytes of its
own: the suffix is then the same only up to that string (the *stem*) and after it (the *tail*). Such a
run is cut at each stem and tail into its texts and paddings, and both are decoded as strings (a
padding is read by no one, but an event whose padding is no JSON string is no JSON: its stream is read
as before); the cut pieces, put back around the stem and the tail, must give the run's own bytes, event
for event.

Exactness: a text (and a padding) is taken only when it is one whole JSON string's body in place (no
unescaped quote, no escape left open at its end; its escapes and UTF-8 are then msgspec's to read, as
in the whole event), so the event decodes to the checked shape with that string as its content. A
padding is the value of a key named ``obfuscation``, which no read of a chat event looks at (no field
of ``ChatChunk`` and its parts, no key the loosely read fields are read by; the fields kept whole, such
as ``usage`` or ``timings``, are refused in the shape's events): events that differ in it alone read
alike. Anything else (no shape, an event that fits no rule here, a stream not one ``data:``
line per event) returns None and the stream is read as before (``ChatDialect.tally_array``, else over
dicts).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.dialects.base import Tally
from gateway.dialects.chat_events import ChatChunk, answered_texts, read_end, reasoning_of, tally_chunks
from gateway.kept_chunks import KeptChunks

_CONTENT = b'"content":"'
_OBFUSCATION = b',"obfuscation":"'
"""OpenAI's padding: the last field of each chunk, a string of its own length and bytes in every one."""
_SEPARATOR = b'","'
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


def _string_bodies(joined: bytes, count: int) -> bool:
    """``joined`` is ``count`` pieces joined by ``","``, each one JSON string's whole body (no unescaped quote, no
    escape left open at its end): then every unescaped quote is a separator's."""
    bare = joined
    if b"\\" in joined:
        bare = joined.replace(b"\\\\", b"")  # escaped backslashes: each backslash left escapes the byte after it
        if bare.endswith(b"\\") or b'\\","' in bare:
            return False  # a piece's last escape would take the quote that closes it
        bare = bare.replace(b'\\"', b"")
    return bare.count(b'"') == 2 * (count - 1)


def _texts(pieces: list[bytes], lead: bytes) -> bytes | None:
    """``lead`` + each piece, joined as the bodies of consecutive JSON strings (``a","b","c``), when each is one
    string's whole body (``_string_bodies``); else None."""
    joined = lead + (_SEPARATOR + lead).join(pieces) if lead else _SEPARATOR.join(pieces)
    return joined if _string_bodies(joined, len(pieces)) else None


def _padding(suffix: bytes) -> tuple[bytes, bytes] | None:
    """The suffix learnt from the run's first event cut around its ``obfuscation`` string's body: (the bytes up to
    it, the bytes after it); ``(b"", suffix)`` when it has none (the suffix is the same in every event); None when
    its value is not followed by a quote."""
    key = suffix.rfind(_OBFUSCATION)
    if key < 0:
        return b"", suffix
    stem = suffix[: key + len(_OBFUSCATION)]
    value = _STRING_BODY.match(suffix, len(stem))
    if value is None:  # pragma: no cover - the pattern matches the empty string
        return None
    tail = suffix[value.end() :]
    return (stem, tail) if tail.startswith(b'"') else None


def _plain_run(joined: bytes, suffix: bytes, count: int) -> tuple[list[bytes], list[bytes]] | None:
    """The rest of each text after the head (and no padding), when each of the run's ``count`` events (``joined``:
    their bytes after the head) is the rest of a text and ``suffix``."""
    pieces = joined.split(suffix)
    # One suffix per chunk, at its end: each chunk ends with a blank line, and the suffix holds the only one of the
    # event (a piece that held another newline fails the decode: a text holds no raw newline).
    return (pieces, []) if len(pieces) == count + 1 and not pieces.pop() else None


def _padded_run(joined: bytes, stem: bytes, tail: bytes, count: int) -> tuple[list[bytes], list[bytes]] | None:
    """The rest of each text after the head, and each padding, when each of the run's ``count`` events (``joined``:
    their bytes after the head) is the rest of a text, ``stem``, a padding and ``tail``.

    Cut at every ``stem`` and ``tail``, the pieces are taken only when they hold no newline and, put back
    together around ``stem`` and ``tail`` in turn, give the run's own bytes: each event's newlines are then its
    tail's (the last two bytes of every chunk kept whole), so each event was cut alone, once at a stem and once at
    a tail (none holds the key twice, or not at all). Whether each piece is one string's body is ``_texts``' check,
    as for any text.
    """
    strings = joined.replace(stem, _SEPARATOR).replace(tail, _SEPARATOR)
    if not strings.endswith(_SEPARATOR) or b"\n" in strings:
        return None
    pieces = strings[: -len(_SEPARATOR)].split(_SEPARATOR)
    if len(pieces) != 2 * count:
        return None
    rebuilt = [b"", stem, b"", tail] * count
    rebuilt[::2] = pieces  # text, stem, padding, tail, text, ...
    if b"".join(rebuilt) != joined:
        return None
    return pieces[::2], pieces[1::2]


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


def _shaped(entries: KeptChunks, index: int, prefix: bytes, stem: bytes, tail: bytes) -> bool:
    """Entry ``index`` is one event of the shape: ``prefix``, a string's body on one line, then ``tail``, or (padded)
    ``stem``, another string's body and ``tail`` (or, an entry that is one event's data, the same without
    ``data: `` and the blank line)."""
    data = entries.datas[index]
    if index in entries.parts:
        prefix, tail = prefix[6:], tail[:-2]
    else:
        data = entries.heads[index] + data
    if len(data) < len(prefix) + len(tail) or not data.startswith(prefix) or not data.endswith(tail):
        return False
    middle = data[len(prefix) : len(data) - len(tail)]
    strings = middle.split(stem) if stem else [middle]
    return b"\n" not in middle and len(strings) == (2 if stem else 1) and _texts(strings, b"") is not None


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
    if not suffix.startswith(b'"') or not suffix.endswith(b"\n\n") or suffix.count(b"\n") != 2 or b"\r" in suffix:
        return None
    padding = _padding(suffix)
    if padding is None:
        return None
    stem, tail = padding
    joined = b"".join(datas[low:high])
    run = _padded_run(joined, stem, tail, count) if stem else _plain_run(joined, suffix, count)
    if run is None:
        return None
    texts, paddings = run
    # The shape's check: two events of it decoded whole, just before the texts. The two entries before the run
    # when they are of the shape (a stream's first answer events, kept before its head was learnt), else the
    # run's first two.
    prefix = head[: key + len(_CONTENT)]
    shaped = (
        low >= 2 and _shaped(entries, low - 2, prefix, stem, tail) and _shaped(entries, low - 1, prefix, stem, tail)
    )
    whole = 0 if shaped else 2
    strings = _texts(texts[whole:], lead)
    padded = _texts(paddings[whole:], b"") if stem else b""
    if strings is None or padded is None:
        return None
    parts: list[bytes] = []
    times: list[float] = []
    if not _datas(entries, 0, low + whole, parts, times):
        return None
    start = len(times)  # the run's texts, after the two events decoded whole
    parts.append(b'"' + strings + b'"')
    if stem:
        parts.append(b'"' + padded + b'"')  # read by no one, but each must be a string for its event to be JSON
    run_times = list(entries.times[low + whole : high])
    if not _datas(entries, high, len(datas), parts, times):
        return None
    try:
        events: list[Any] = _DECODER.decode(b"[" + b",".join(parts) + b"]")
    except msgspec.MsgspecError:
        return None
    stop = start + len(run_times)
    after = stop + len(run_times) if stem else stop  # the paddings after the texts
    if len(events) != after + len(times) - start or not _one_shape(events[start - 2], events[start - 1]):
        return None
    shape = events[start - 1]
    model = shape.model if isinstance(shape.model, str) else None
    tally = into if into is not None else Tally()
    tally_chunks(events[:start], times[:start], 0, tally)
    block = events[start:stop]
    if "" in block:
        tally_chunks(block, run_times, 0, tally, model, bool(reasoning_of(shape.choices[0].delta)))
    elif block:
        answered_texts(tally, block, run_times, model)
    tally_chunks(events[after:], times[start:], 0, tally)
    if timing_tail:
        # The stream's last events: the paddings stand for none.
        last = events if after == stop or len(events) - after >= timing_tail else [*events[:stop], *events[after:]]
        read_end(tally, last[-timing_tail:])
    return tally
