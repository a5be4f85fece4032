"""What every API's dialect tells the meter, the relay and the error paths, behind one small interface.

Each API streams its own events: chat and completions send ``choices`` chunks and ``data: [DONE]``,
the Responses API sends typed ``response.*`` events, the Messages API sends ``message_start``,
``content_block_delta`` ... ``message_stop``. The meter (``gateway.meter``) and the forwarder
(``gateway.relay.forward``) are written once, against ``Dialect``; each dialect reads its own
events. The same object renders the gateway's errors in the shape that API's clients parse.

A dialect is stateless and shared: one instance per API (``gateway.dialects.dialect_for``).
"""

from __future__ import annotations

from collections.abc import MutableSequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from gateway.errors import GatewayError
from gateway.kept_chunks import KeptChunks
from gateway.samples import Endpoint

LookKind = Literal["output", "error", "finish", "none"]
StopReason = Literal["stop", "length", "tool", "filter", "other"]
"""Why an answer ended, in one vocabulary for every API: ``stop`` (chat ``stop``, Messages ``end_turn`` /
``stop_sequence``), ``length`` (the token limit), ``tool`` (it calls a tool and waits for the result), ``filter``
(a content filter or refusal), ``other`` (anything else a provider says)."""


class Look(NamedTuple):
    """What one event says before the first output: output came, an error, an (empty) finish, or nothing yet."""

    kind: LookKind
    error: Any = None
    """For ``error``: the error object (``message``/``code``/``type``), to tell the request's faults apart."""
    response_id: str | None = None
    """The id the provider gave the response (Responses API), when this event names it."""


NOTHING = Look("none")
OUTPUT = Look("output")
FINISH = Look("finish")


@dataclass(slots=True)
class CallParts:
    """One tool call as it arrives: its name (from the call's first part) and its argument pieces."""

    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a finished answer: the function's name and its arguments as the provider wrote them."""

    name: str | None
    arguments: str


@dataclass(slots=True)
class Tally:
    """What a dialect reads from a whole response (every event, or the body), before tokens are counted."""

    answer: list[str] = field(default_factory=list)
    first_output_at: float | None = None
    first_answer_at: float | None = None
    last_answer_at: float | None = None
    usage_prompt: int | None = None
    usage_completion: int | None = None
    usage_cached: int | None = None
    usage_cache_creation: int | None = None
    finished: bool = False
    incomplete: bool = False
    error_message: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    malformed: bool = False
    tool_calls: bool = False
    provider_timings: dict[str, Any] | None = None
    last_sequence: int | None = None
    output_events: MutableSequence[float] = field(default_factory=list)
    """Arrival time of each event that carried output (answer, reasoning or a tool call), once per event."""
    calls: dict[tuple[int, int], CallParts] = field(default_factory=dict)
    """The answer's tool calls by (choice, call) index, in order of arrival: what the validity check reads."""
    stop: StopReason | None = None
    """Why the answer ended, when the provider said (None: it did not)."""
    thought_signed: bool = False
    """Chat: a tool call carried a thought signature (Gemini's ``extra_content.google.thought_signature``)."""
    _event_counted: bool = False
    _standard_usage: bool = False
    """Chat: a standard usage object was seen (Groq's own usage is then not read)."""
    _groq_usage: Any = None
    """Chat: Groq's own usage, as last seen (read at the end when no standard usage came)."""

    def call(self, key: tuple[int, int], name: object, arguments: object) -> None:
        """A tool call's part: its name (the first that names it wins) and a piece of its arguments."""
        parts = self.calls.get(key)
        if parts is None:
            parts = self.calls[key] = CallParts()
        if parts.name is None and isinstance(name, str) and name:
            parts.name = name
        if isinstance(arguments, str) and arguments:
            parts.arguments.append(arguments)

    def tool_call_list(self) -> tuple[ToolCall, ...]:
        """The answer's tool calls, each with its arguments joined."""
        return tuple(ToolCall(parts.name, "".join(parts.arguments)) for parts in self.calls.values())

    def answered(self, text: str, at: float) -> None:
        self.answer.append(text)
        if self.first_answer_at is None:
            self.first_answer_at = at
        self.last_answer_at = at
        self.output(at)

    def next_event(self) -> None:
        """The dialect moves on to the next event (its choices may each carry output: counted once)."""
        self._event_counted = False

    def output(self, at: float) -> None:
        if self.first_output_at is None:
            self.first_output_at = at
        if not self._event_counted:
            self._event_counted = True
            self.output_events.append(at)

    def timed_from(self, at: float) -> None:
        """The first output and answer, and the output events, from ``at`` (the first token) on: the events before
        it only repeated the prompt (an echoed completions stream: ``gateway.relay.echo``); their text stays."""
        if self.first_output_at is not None and self.first_output_at < at:
            self.first_output_at = at
        if self.first_answer_at is not None and self.first_answer_at < at:
            self.first_answer_at = at
        events = self.output_events
        if events and events[0] < at:
            self.output_events = [time for time in events if time >= at]

    def timing(self, source: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            if self.provider_timings is None:
                self.provider_timings = {}
            self.provider_timings[source] = value


class Dialect(Protocol):
    """One API's events and error shapes. See the module docstring."""

    api: Endpoint

    done_data: bytes | None
    """An event's whole ``data`` that ends the stream and is no event at all (chat: ``[DONE]``); None if none."""

    clean_end: bytes
    """What ends the client's stream when the answer is complete but the provider's ending never came."""

    keep_alive: bytes
    """What keeps a silent stream open, which the client's parser skips (an SSE comment; Messages' ``ping``)."""

    end_mark: bytes | None
    """When set, ``may_end(data)`` is exactly whether ``data`` holds these bytes: the meter looks for them itself, on
    every chunk, without the call."""

    def may_end(self, data: bytes) -> bool:
        """A cheap scan: these bytes may hold the stream's last event (then they are parsed)."""
        ...

    def may_finish(self, data: bytes) -> bool:
        """A cheap scan: these bytes may complete the answer (only usage and the ending may follow)."""
        ...

    def is_terminal(self, event: dict[str, Any]) -> bool:
        """Nothing follows this event: the stream is over, whatever the connection does next."""
        ...

    def first_look(self, event: dict[str, Any]) -> Look:
        """Read one event before the first output (called on the byte path, so cheap)."""
        ...

    def tally(
        self, events: list[tuple[float, dict[str, Any] | None]], into: Tally | None = None, final: bool = True
    ) -> Tally:
        """Read events of a stream (``None``: an event that was not a JSON object), in order, on from ``into`` (the
        tally of the events before them; None: these are the first). ``final``: they are the last (what is read
        from a stream's end, its timings, is read from them); else the stream goes on, and so will the read."""
        ...

    def tally_array(
        self, array: bytes, times: list[float], into: Tally | None = None, final: bool = True
    ) -> Tally | None:
        """``tally`` of events as one JSON array (``times[i]``: event i's arrival), read without building their
        dicts; None (``into`` untouched) when the dialect has no such read or an event does not fit it."""
        ...

    def tally_kept(self, entries: KeptChunks, into: Tally | None = None, final: bool = True) -> Tally | None:
        """``tally`` of a meter's kept entries, read from their bytes as they are (chat: its answer events of one
        shape as their text alone); None (``into`` untouched) when the dialect has no such read or the entries do
        not fit it (then ``tally_array`` reads them)."""
        ...

    def tally_body(self, body: dict[str, Any]) -> Tally:
        """Read a whole (non-streamed) response body."""
        ...

    def tally_whole(self, body: bytes) -> Tally | None:
        """``tally_body`` of a whole body read from its bytes as they are (chat: decoded into the fields it reads
        alone); None when the dialect has no such read or the body does not fit it (then it is decoded whole)."""
        ...

    def error_of(self, event: dict[str, Any]) -> Any:
        """The error object if this event is an error event (ends the upstream's part), else None."""
        ...

    def opens_answer(self, event: dict[str, Any]) -> bool:
        """In a stream that continues another (mid-stream recovery): where its answer starts. What comes
        before (a role chunk, ``message_start``, a block's opening) the client already has, and is dropped."""
        ...

    def render_error(self, error: GatewayError) -> bytes:
        """The gateway's own error as this API's clients expect the body of an error response."""
        ...

    def stream_error(self, message: str, code: str, last_sequence: int | None) -> bytes:
        """An error event in this API's shape: how a stream that cannot be completed ends."""
        ...

    def failed_stream(self, message: str, code: str, request_id: str, model: str) -> bytes:
        """A whole failed stream, for a request whose 200 went out before any attempt answered (keep-alives):
        what the API's stream readers accept as a failure from the start (Responses: created, then failed)."""
        ...


class DictReads:
    """The typed reads (``tally_kept``, ``tally_array``, ``tally_whole``) of a dialect that has none: its events and
    bodies are read decoded into dicts (``tally``, ``tally_body``) only. The Messages and Responses dialects are such;
    chat, the most relayed, reads its bytes as they are."""

    def tally_kept(self, entries: KeptChunks, into: Tally | None = None, final: bool = True) -> Tally | None:
        return None  # no read of the kept bytes as they are: ``tally_array`` reads them

    def tally_array(
        self, array: bytes, times: list[float], into: Tally | None = None, final: bool = True
    ) -> Tally | None:
        return None  # read over dicts (``tally``): no typed read of these events

    def tally_whole(self, body: bytes) -> Tally | None:
        return None  # decoded whole (``tally_body``): no typed read of these bodies


def error_object(event: dict[str, Any]) -> Any:
    """The error object of a typed ``error`` event (``{"type": "error", "error": {...}}``: Messages, Responses), or the
    event itself where it holds none (an ``error`` event with its ``code`` and ``message`` at the top)."""
    error = event.get("error")
    return error if isinstance(error, dict) else event


def count(value: object) -> int | None:
    """A token count as reported (None for anything that is not a non-negative integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def listed(value: object) -> list[Any]:
    """An array a provider sent, or an empty one for anything else: a field that should hold a list (choices, content
    blocks, tool calls) is read as one whatever the provider put there, never iterated as a string or a number."""
    return value if isinstance(value, list) else []
