"""An incremental splitter of Server-Sent Events, for watching a stream on the side.

The relay forwards upstream bytes untouched; this splitter only tells the meter where each
event ends and what its ``data`` is. It never re-serialises anything, and it holds at most
one partial event between calls.

Scans of relayed bytes on the per-chunk path are written ``data.find(x) >= 0``, not ``x in data``:
on ``bytes``, ``in`` first tries its operand as an integer (``65 in b"A"``), which raises a
``TypeError`` and clears it before the search runs; ``find`` searches at once, same answer.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

MAX_EVENT_BYTES: Final = 64 * 1024 * 1024
"""Longest one event may grow without ending (and what a stream may send before its first output): past it the stream
is the provider's failure (``EventTooLarge``), not a buffer growing until the deadline. Far above any event providers
send (a Responses ``response.completed`` holding a long answer, or images, is a few MB)."""


class EventTooLarge(ValueError):
    """An event passed ``MAX_EVENT_BYTES`` without ending; the relay turns it into the provider's error."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"the stream sent {size} bytes of one event without ending it (the limit is {MAX_EVENT_BYTES})"
        )
        self.size = size


class SSESplitter:
    """Feed raw bytes in arrival order; get back the ``data`` payload of each completed event.

    Created per stream, not thread-safe. Events with no ``data`` line (comments, keep-alives)
    are dropped. Multiple ``data`` lines of one event are joined with ``\\n``, as the SSE spec says.
    """

    __slots__ = ("buffer", "_more", "_size")

    def __init__(self) -> None:
        self.buffer = b""
        """The bytes of an event not completed yet (empty between events): read, never written, by the meter's
        per-chunk check (an attribute, not ``pending``'s call). Its continuation, while no line end could have
        ended it, is in ``_more``."""
        self._more: list[bytes] = []
        """Chunks that went on the pending event without a blank line: held as they came, joined once when the
        event ends (appending each to ``buffer`` copied the event so far per chunk, quadratic in its size)."""
        self._size = 0
        """Bytes of the pending event (``buffer`` and ``_more``)."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The ``data`` of each event ``chunk`` completes. Raises ``EventTooLarge`` when the pending event passes
        ``MAX_EVENT_BYTES``: one comparison per chunk that goes on an event (none between events)."""
        buffer = self.buffer
        if buffer:
            more = self._more
            if not chunk.endswith(b"\n\n") and goes_on(more[-1] if more else buffer, chunk):  # (the usual end: no call)
                more.append(chunk)
                self._size += len(chunk)
                if self._size > MAX_EVENT_BYTES:
                    raise EventTooLarge(self._size)
                return []
            buffer = b"".join((buffer, *more, chunk)) if more else buffer + chunk
            more.clear()
        else:
            buffer = chunk
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r") and not buffer.endswith(b"\r\r"):
                # It may be the first half of a "\r\n" split across chunks: decide next time. (After
                # "\r\r" the event is over either way: a "\n" next is only an empty line.)
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = buffer.split(b"\n\n")
        self.buffer = blocks.pop() + held
        self._size = len(self.buffer)
        if self._size > MAX_EVENT_BYTES:
            raise EventTooLarge(self._size)
        payloads = []
        for block in blocks:
            data = data_of(block)
            if data is not None:
                payloads.append(data)
        return payloads

    def flush(self) -> list[bytes]:
        """The last event when a stream ends without its closing blank line."""
        block = b"".join((self.buffer, *self._more))
        self.buffer, self._size = b"", 0
        self._more.clear()
        data = data_of(block.replace(b"\r", b"\n").strip(b"\n"))
        return [] if data is None else [data]

    @property
    def pending(self) -> int:
        """Bytes of an event not completed yet."""
        return self._size


_BLANK_LINE: Final = (b"\n\n", b"\n\r", b"\r\r")
"""How two line ends in a row (a blank line, which ends an event) show in raw bytes, whatever the line ends."""


def goes_on(pending: bytes, chunk: bytes) -> bool:
    """Whether ``chunk``, after pending bytes that end with ``pending``, surely completes no event: no blank line in
    it, nor across the seam, nor at the pending end (a ``\r`` held after a line end, to tell ``\r\n`` from ``\r``).

    Two line ends in a row (each ``\r\n``, ``\n`` or ``\r``) always show as ``\n\n``, ``\n\r`` or ``\r\r``;
    without them the event goes on, and its chunks can be held as they came. Scans of ``chunk`` and of four bytes
    around the seam, no copy of the chunk; True is never wrong, False only sends the chunk the general way."""
    seam = pending[-2:] + chunk[:2]
    for mark in _BLANK_LINE:
        if chunk.find(mark) >= 0 or seam.find(mark) >= 0:
            return False
    return True


def whole_events(chunk: bytes) -> list[bytes]:
    """The ``data`` of each event of ``chunk``, a run of whole events (it ends with a blank line).

    The same as a new ``SSESplitter``'s ``feed(chunk)``, with a fast path for what providers send:
    one ``data: `` line per event, ``\\n`` line endings. Then the chunk holds exactly two newlines
    per event, and one split gives the events.
    """
    blocks = chunk.split(b"\n\n")
    blocks.pop()  # what follows the last blank line: nothing, in a run of whole events
    if (
        b"\r" not in chunk
        and chunk.count(b"\n") == 2 * len(blocks)
        and chunk.count(b"data: ") == len(blocks)
        and all(block.startswith(b"data: ") for block in blocks)
    ):
        return [block[6:] for block in blocks]
    return SSESplitter().feed(chunk)


def joined_events(chunk: bytes) -> bytes | None:
    """``b",".join(whole_events(chunk))`` when ``chunk`` (a run of whole events) is one ``data: `` line per event.

    Then the separators between events are exactly the ``\n\ndata: `` runs, and replacing them
    with commas joins the events' data without splitting them; the chunk holds one event per
    ``\n\n``. None for any other shape (a newline left after the replacement: more lines to an
    event, another field, a comment; ``\r`` line endings; ``data:`` without its space).
    """
    if b"\r" in chunk or not chunk.startswith(b"data: ") or not chunk.endswith(b"\n\n"):
        return None
    joined = chunk[6:-2].replace(b"\n\ndata: ", b",")
    return None if b"\n" in joined else joined


def data_of(block: bytes) -> bytes | None:
    """The ``data`` of one event's block (its lines, without the blank line that ends it); None if it has none."""
    if block.startswith(b"data:") and b"\n" not in block:
        # The common case, one data line per event: no list, no join.
        data = block[5:]
        return data[1:] if data.startswith(b" ") else data
    lines = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            data = line[5:]
            lines.append(data[1:] if data.startswith(b" ") else data)
    return b"\n".join(lines) if lines else None


_decode: Final = msgspec.json.decode
"""``msgspec.json.decode``, held where compiled code calls it directly (no module, attribute and method look-ups by
name on each event the meter parses before a stream's first output)."""


def parse_event(data: bytes) -> dict[str, Any] | None:
    """One event's data as a JSON object, as ``json.loads`` reads it; None when it is not JSON, or not an object.

    msgspec decodes first, in a fraction of ``json``'s time; whatever it refuses (NaN,
    out-of-range floats, lone surrogates, a byte-order mark, UTF-16, invalid JSON) goes to
    ``json.loads``, so the result is ``json``'s.
    """
    try:
        event = _decode(data)
    except (msgspec.MsgspecError, RecursionError):
        try:
            event = json.loads(data)
        except ValueError:
            return None
    return event if isinstance(event, dict) else None
