"""Timestamps and token counts of one response: a pure function of its bytes and a clock.

The relay calls ``StreamMeter.feed`` with each chunk as it forwards it. On that hot path the meter only splits events
and notes arrival times; it parses JSON only until the first chunk that carries output (so the relay knows the first
token has come). Everything else (which events hold answer text, the token count, tokens per second) is read in batches:
every ``FOLD_ENTRIES`` kept chunks, the older ones are read into a running ``Tally`` (answer text, usage, output times:
what the finish needs) and their bytes let go, so a long stream holds its text, not its JSON; the last batch and the
token count are worked out in ``finish``, after the last byte has gone to the client (before, once, when a translated
stream's client must be shown the count its provider did not report). A batch is read exactly as the whole stream was
(one typed read of a JSON array, else over dicts), each dialect's read going on from where the last stopped, and what
comes from a stream's end (timings, Groq's usage) read once, at the finish: the readings are the same whatever the
batches.

Definitions (DESIGN.md): TTFT runs from sending the upstream request to the first chunk that
carries output (content, reasoning or a tool-call delta); tokens per second is answer tokens
÷ (last answer token − first answer token), undefined under 2 tokens.

Which event carries output, holds answer text, usage or an error is each API's own: the meter asks
its ``Dialect`` (``gateway.dialects``: chat and completions, Responses, Messages) and is otherwise
the same for all of them.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Final

import msgspec

from gateway.dialects import CHAT, Dialect, Tally, scans
from gateway.kept_chunks import KeptChunks
from gateway.reading import Reading, reading_of
from gateway.sse import SSESplitter, data_of, joined_events, parse_event, whole_events
from gateway.tokens import TokenCounter
from gateway.types import Clock

_find: Final = scans.find
"""``scans.find``, held where compiled code reads it directly (a ``Final`` is a C static: no look-up by name)."""

Repeats = Callable[[dict[str, Any]], bool]
"""Whether an event with text only repeats the request's prompt (``StreamMeter``'s ``repeats``)."""
FOLD_ENTRIES = 256
"""Kept chunks (or events) past which the older ones are read into the running tally and their bytes dropped:
with one event a chunk, a few hundred events' JSON held at a time, not a 200k-token stream's 4 MB."""
FOLD_KEEP = 8
"""Chunks left unread at a fold, so that what a stream's end is read from (chat's last 3 events) is read last."""


def _parse_all(datas: list[bytes]) -> list[dict[str, Any] | None]:
    """Each event's JSON object (None where it is not one), parsed in one call when all are valid.

    One decode over a joined array costs a fraction of one call per event (measured: the
    per-call overhead was most of the meter's CPU on a 64-chunk answer), and msgspec's decoder
    builds the objects in half the time of ``json.loads`` (the largest part of ``finish``). It is
    stricter than ``json`` (no NaN, no out-of-range floats, no lone surrogates): whatever it
    refuses, or any invalid event, sends the stream back to one ``json.loads`` per event, so the
    reading is the same as ``json`` would give.
    """
    if not datas:
        return []
    try:
        events = msgspec.json.decode(b"[" + b",".join(datas) + b"]")
    except msgspec.MsgspecError:
        return [parse_event(data) for data in datas]
    if len(events) != len(datas):
        # An event's data held several comma-separated values ("1, 2"): parse one by one.
        return [parse_event(data) for data in datas]
    return [event if isinstance(event, dict) else None for event in events]


def _one_event(chunk: bytes) -> bytes | None:
    """The data of ``chunk`` when it is one event of a ``data: `` line, after at most one line of another field
    (chat's ``data: {…}``; Responses' and Messages' ``event: name`` then ``data: {…}``), as ``SSESplitter``
    would cut it; None for any other chunk (``\r`` line ends, several events, or lines, an event cut short)."""
    if not chunk.endswith(b"\n\n") or _find(chunk, b"\r") >= 0:
        return None
    end = len(chunk) - 2
    line = _find(chunk, b"\n")
    if line == end:
        return chunk[6:end] if chunk.startswith(b"data: ") else None
    if chunk.find(b"\n", line + 1) == end and chunk.startswith(b"data: ", line + 1) and not chunk.startswith(b"data:"):
        return chunk[line + 7 : end]
    return None


@functools.cache
def _ending_event(done_data: bytes | None) -> bytes | None:
    """The ending event as providers send it; one object per dialect, not one per stream."""
    return None if done_data is None else b"data: " + done_data + b"\n\n"


class StreamMeter:
    """Watches one streamed response. Created per attempt, not thread-safe.

    ``sent_at`` is the clock reading when the upstream request was sent; ``dialect`` reads the
    events of the API the stream speaks (chat by default). ``repeats``: for a completions stream that echoes its
    prompt (``gateway.relay.echo.EchoedPrompt``), whether an event with text only repeats the prompt: no output,
    so the first token, and the answer's timings, start after it.
    """

    __slots__ = (
        "_clock",
        "_sent_at",
        "_splitter",
        "_events",
        "_tally",
        "_reading",
        "_dialect",
        "_may_end",
        "_end_mark",
        "_may_finish",
        "_ending",
        "_repeats",
        "first_output_at",
        "done",
        "malformed",
        "finish_seen",
        "finish_arrived",
        "first_error",
        "response_id",
        "received_bytes",
        "_fold_at",
    )

    fold_at: ClassVar[int] = FOLD_ENTRIES
    """Kept chunks that trigger a fold (a class attribute: a test's subclass folds sooner, or never); read once per
    meter (``_fold_at``): compiled code reads a class attribute by name, and ``feed`` reads it on every chunk."""

    def __init__(self, clock: Clock, sent_at: float, dialect: Dialect = CHAT, repeats: Repeats | None = None) -> None:
        self._clock = clock
        self._repeats = repeats
        self._sent_at = sent_at
        self._splitter = SSESplitter()
        self._events = KeptChunks()
        """(arrival, bytes, whole chunk?): an event's data, or a chunk of whole events to split in ``finish``; held
        column by column (``gateway.kept_chunks``): a held-open stream keeps each chunk's bytes, not a tuple more."""
        self._tally: Tally | None = None
        """What the chunks read so far said (``FOLD_ENTRIES``); None while none was."""
        self._reading: Reading | None = None  # the finish's, once made
        self._dialect = dialect
        self._may_end = dialect.may_end
        self._may_finish = dialect.may_finish
        """The dialect's two scans, bound once: ``feed`` calls them on every chunk."""
        self._end_mark = dialect.end_mark
        """What ``may_end`` looks for, when that is all it does (chat's ``[DONE]``): found in ``feed``, no call."""
        self._ending = _ending_event(dialect.done_data)
        """The ending event as providers send it (chat: ``data: [DONE]``), to find it at a chunk's end."""
        self.first_output_at: float | None = None
        self.done = False
        """The stream's ending came (``data: [DONE]``, ``response.completed``, ``message_stop``): it is over."""
        self.malformed = False
        """An event that is not JSON arrived before the first output."""
        self.finish_seen = False
        """The answer finished before any output: an empty answer, but a complete one."""
        self.finish_arrived = False
        """The answer is complete (a non-null ``finish_reason``, ...): only usage and the ending may follow."""
        self.first_error: Any = None
        """The ``error`` object of an error event that came before any output (the stream's first word)."""
        self.response_id: str | None = None
        """The response's id, when an event before the first output named it (Responses API)."""
        self.received_bytes = 0
        """Bytes fed so far: the router reads a stream's progress from it while it runs (``StreamProgress``)."""
        self._fold_at = self.fold_at

    def feed(self, chunk: bytes) -> None:
        """Note one relayed chunk. Cheap: no JSON once the first output has been seen.

        Until the first output, events are split and read one by one (the first one that carries
        output is timed). After it, a chunk of whole events that cannot hold the stream's ending
        is kept as it is: only the end of the answer matters on the byte path (found with one scan
        of the chunk), and ``finish`` splits it into events later, each timed by its chunk's
        arrival as before. So is the rest of the chunk that held the first output, and the part of
        a chunk before the ending event that ends it (chat's ``data: [DONE]``). Anything else (a
        chunk that ends mid-event, or may end the stream elsewhere) is split at once.
        """
        now = self._clock()
        self.received_bytes += len(chunk)
        if self.first_output_at is None:
            data = None if self._splitter.buffer else _one_event(chunk)
            if data is not None:
                # One event, nothing pending (every chunk before a stream's first token, as providers send them): its
                # data is what the splitter would cut, noted without it.
                self._note(now, data)
                return
            if self._splitter.buffer or _find(chunk, b"\r") >= 0:  # not ``in`` (``gateway.dialects.scans``)
                for data in self._splitter.feed(chunk):
                    self._note(now, data)
                return
            chunk = self._until_output(now, chunk)
            if not chunk:
                return
            if self.ttft_s is None:  # read anew: ``_until_output`` may have set it (not the narrowed None above)
                self._splitter.feed(chunk)  # the start of an event: held until its end arrives
                return
        if chunk.endswith(b"\n\n") and not self._splitter.buffer:
            mark = self._end_mark
            if _find(chunk, mark) < 0 if mark is not None else not self._may_end(chunk):
                # ``_keep``, inlined: this is every chunk of a stream after its first token.
                kept = self._events
                kept.arrive(now)
                datas = kept.datas
                head = kept.head
                if head and chunk.startswith(head):  # held without the beginning it shares with the stream's others
                    datas.append(chunk[len(head) :])
                    kept.heads.append(head)
                else:
                    kept.keep_unshared(chunk)
                if not self.finish_arrived and self._may_finish(chunk):
                    self.finish_arrived = True
                if len(datas) >= self._fold_at:
                    self._fold()
                return
            ending = self._ending
            if ending is not None and chunk.endswith(ending):
                rest = chunk[: -len(ending)]
                if (not rest or rest.endswith(b"\n\n")) and not self._may_end(rest):
                    if rest:
                        self._keep(now, rest)
                    self.done = True
                    return
        for data in self._splitter.feed(chunk):
            self._note(now, data)

    def _until_output(self, now: float, chunk: bytes) -> bytes:
        """Note the whole events of ``chunk`` (no ``\r``, nothing pending) up to the first output; the rest.

        Each event is cut where the splitter would cut it (at each ``\n\n``, from the left).
        """
        start = 0
        while self.first_output_at is None:
            end = chunk.find(b"\n\n", start)
            if end < 0:
                break
            if chunk.startswith(b"data: ", start) and chunk.find(b"\n", start, end) < 0:
                data: bytes | None = chunk[start + 6 : end]  # ``data_of``'s common case, without the slice and call
            else:
                data = data_of(chunk[start:end])
            start = end + 2
            if data is not None:
                self._note(now, data)
        return chunk[start:] if start else chunk

    def _keep(self, now: float, chunk: bytes) -> None:
        """A run of whole events after the first output, none of them the stream's ending: split in ``finish``."""
        self._events.append(now, chunk, True)
        if not self.finish_arrived and self._dialect.may_finish(chunk):
            self.finish_arrived = True
        if len(self._events) >= self._fold_at:
            self._fold()

    def _note(self, now: float, data: bytes) -> None:
        dialect = self._dialect
        if data == dialect.done_data:
            self.done = True
            return
        # ``KeptChunks.append`` of one event's data, inlined: every event before the first token comes here.
        kept = self._events
        kept.arrive(now)
        datas = kept.datas
        kept.parts.append(len(datas))
        datas.append(data)
        kept.heads.append(b"")
        if not self.finish_arrived and self._may_finish(data):
            self.finish_arrived = True
        if len(datas) >= self._fold_at:
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
            if self._repeats is None or not self._repeats(event):
                self.first_output_at = now
        elif look.kind == "error":
            self.first_output_at = now
            self.first_error = look.error
        elif look.kind == "finish":
            self.finish_seen = True

    def end_of_stream(self) -> None:
        """The upstream closed: complete an event that lacked only its closing blank line.

        An event cut short (its data not valid JSON) is dropped, as the SSE spec drops an event the stream ends in
        the middle of; the relay does not forward it either.
        """
        now = self._clock()
        for data in self._splitter.flush():
            if data == self._dialect.done_data or parse_event(data) is not None:
                self._note(now, data)

    @property
    def api(self) -> str:
        return self._dialect.api

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_output_at is None else self.first_output_at - self._sent_at

    def _timed_events(self, entries: KeptChunks) -> Iterator[tuple[float, bytes]]:
        """Every event's data in ``entries`` with its arrival, the chunks kept whole split now."""
        done = self._dialect.done_data
        for at, data, whole_chunk in entries:
            if whole_chunk:
                for piece in whole_events(data):
                    if piece != done:
                        yield at, piece
            else:
                yield at, data

    def _array(self, entries: KeptChunks) -> tuple[bytes, list[float]]:
        """Every event's data in one JSON array, with each event's arrival; chunks kept whole joined, not split.

        The bytes are those ``_parse_all`` decodes. A run of chunks kept whole is joined at once
        by ``joined_events`` when together they are one ``data: `` line per event (then each of
        them is, and holds one event per blank line); otherwise each chunk is split as
        ``_timed_events`` splits it. (A chunk kept whole cannot hold the chat ending ``[DONE]``:
        ``feed`` splits any that may.)
        """
        done = self._dialect.done_data
        arrivals = entries.times
        parts: list[bytes] = []
        times: list[float] = []
        start, end = 0, len(entries)
        for single in (*entries.parts, end):
            # The run of chunks kept whole before the next entry that is one event's data (or the end).
            if start < single:
                run = entries.full(start, single)
                chunks = b"".join(run)
                joined = joined_events(chunks)
                if joined is not None:
                    parts.append(joined)
                    # Its events, without a scan: ``joined_events`` dropped the first "data: " and the last blank
                    # line (8 bytes) and made each "\n\ndata: " between two events a comma (7 fewer); no other is left.
                    if (len(chunks) - len(joined) - 8) // 7 + 1 == len(run):
                        times += arrivals[start:single]  # each chunk ends an event: one event each
                    else:
                        for at, chunk in zip(arrivals[start:single], run, strict=True):
                            times += [at] * chunk.count(b"\n\n")
                else:
                    for at, chunk in zip(arrivals[start:single], run, strict=True):
                        for piece in whole_events(chunk):
                            if piece != done:
                                parts.append(piece)
                                times.append(at)
            if single < end:
                parts.append(entries.datas[single])  # one event's data: kept without a head
                times.append(arrivals[single])
            start = single + 1
        return b"[" + b",".join(parts) + b"]", times

    def _fold(self) -> None:
        """Read all but the last ``FOLD_KEEP`` kept chunks into the running tally, and let their bytes go."""
        older = self._events.split(FOLD_KEEP)
        tally = self._tally = self._read(older, self._tally, final=False)
        # Held compactly until the finish: the text as one string (counted whole then, as it must be: a token
        # may span two pieces), the output times as machine floats (8 bytes each, not a 32-byte object).
        if len(tally.answer) > 1:
            tally.answer = ["".join(tally.answer)]
        if not isinstance(tally.output_events, array):
            tally.output_events = array("d", tally.output_events)

    def _read(self, entries: KeptChunks, into: Tally | None, final: bool) -> Tally:
        """The dialect's read of ``entries``, on from ``into``: from their bytes as kept first (chat: the answer
        events of one shape as their text, ``chat_template``), else typed over one array; whatever that does not
        take (an event that is not JSON, or of a shape it does not read) over dicts, as before."""
        tally = self._dialect.tally_kept(entries, into, final)
        if tally is not None:
            return tally
        array, times = self._array(entries)
        tally = self._dialect.tally_array(array, times, into, final)
        if tally is None:
            timed = list(self._timed_events(entries))
            parsed = _parse_all([data for _, data in timed])
            pairs = [(at, event) for (at, _), event in zip(timed, parsed, strict=True)]
            tally = self._dialect.tally(pairs, into, final)
        return tally

    def finish(self, counter: TokenCounter) -> Reading:
        """Work out the reading from everything seen, once (a translated stream without usage may ask first)."""
        if self._reading is None:
            tally = self._read(self._events, self._tally, final=True)
            if self._repeats is not None and self.first_output_at is not None:
                tally.timed_from(self.first_output_at)
            if tally.response_id is None:
                tally.response_id = self.response_id
            self._reading = reading_of(tally, counter, self._sent_at, self.done)
        return self._reading
