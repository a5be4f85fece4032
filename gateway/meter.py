"""Timestamps and token counts of one response: a pure function of its bytes and a clock.

The relay calls ``StreamMeter.feed`` with each chunk as it forwards it. On that hot path the
meter only splits events and notes arrival times; it parses JSON only until the first chunk
that carries output (so the relay knows the first token has come). Everything else (which
events hold answer text, the token count, tokens per second) is worked out once, in
``finish``, after the last byte has gone to the client.

Definitions (DESIGN.md): TTFT runs from sending the upstream request to the first chunk that
carries output (content, reasoning or a tool-call delta); tokens per second is answer tokens
÷ (last answer token − first answer token), undefined under 2 tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.errors import describe_error
from gateway.sse import SSESplitter, parse_event
from gateway.tokens import TokenCounter
from gateway.types import Clock

DONE = b"[DONE]"
_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"')
"""A finish_reason with a value (not null): found with a scan, so that no chunk is parsed after the first token."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What the meter saw of one response; times are seconds from the upstream request."""

    ttft_s: float | None = None
    first_answer_s: float | None = None
    last_answer_s: float | None = None
    tokens_per_s: float | None = None
    output_tokens: int | None = None
    answer_text: str = ""
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    usage_cached_tokens: int | None = None
    """Prompt tokens the provider served from its prompt cache (part of ``usage_prompt_tokens``)."""
    finished: bool = False
    """A ``finish_reason`` arrived: the answer is complete even if ``[DONE]`` did not follow."""
    saw_done: bool = False
    error_message: str | None = None
    """The message of an error event the provider sent inside the stream."""
    response_model: str | None = None
    """The model id the provider reported answering with."""
    malformed: bool = False
    """An event (or the whole body) was not JSON: the client cannot have read a complete answer."""
    tool_calls: bool = False
    """The answer holds a tool (or function) call: its text is arguments, not content."""


def _choices(event: dict[str, Any]) -> list[dict[str, Any]]:
    choices = event.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _answer_of(choice: dict[str, Any]) -> str:
    """The visible answer text in one choice of a chunk or a whole response (tool-call arguments included)."""
    delta = choice.get("delta")
    if (
        delta.__class__ is dict
        and "tool_calls" not in delta
        and "function_call" not in delta
        and "text" not in choice
        and "message" not in choice
    ):
        # The common streamed chunk: only delta.content can hold answer text.
        content = delta.get("content")
        return content if content.__class__ is str else ""
    parts: list[str] = []
    text = choice.get("text")  # /v1/completions
    if isinstance(text, str):
        parts.append(text)
    for holder in (choice.get("delta"), choice.get("message")):
        if not isinstance(holder, dict):
            continue
        content = holder.get("content")
        if isinstance(content, str):
            parts.append(content)
        for call in holder.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                parts.append(function["arguments"])
        function_call = holder.get("function_call")
        if isinstance(function_call, dict) and isinstance(function_call.get("arguments"), str):
            parts.append(function_call["arguments"])
    return "".join(parts)


def _reasoning_of(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _carries_output(choice: dict[str, Any]) -> bool:
    if _answer_of(choice) or _reasoning_of(choice):
        return True
    delta = choice.get("delta")
    # A tool call's first delta may carry only its name, no arguments yet: that is output too.
    return isinstance(delta, dict) and bool(delta.get("tool_calls") or delta.get("function_call"))


def _error_message(event: dict[str, Any]) -> str | None:
    error = event.get("error")
    return None if error is None else describe_error(error)[0]


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(event: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and cached prompt tokens of a ``usage`` object (None where not reported).

    Cached prompt tokens come in each shape providers report them: OpenAI's
    ``prompt_tokens_details.cached_tokens``, DeepSeek's ``prompt_cache_hit_tokens``, and the
    Anthropic-style ``cache_read_input_tokens`` some OpenAI-compatible hosts use.
    """
    usage = event.get("usage")
    if not isinstance(usage, dict):
        return None, None, None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None:
        cached = _count(usage.get("prompt_cache_hit_tokens"))
    if cached is None:
        cached = _count(usage.get("cache_read_input_tokens"))
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), cached


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


class StreamMeter:
    """Watches one streamed response. Created per attempt, not thread-safe.

    ``sent_at`` is the clock reading when the upstream request was sent.
    """

    __slots__ = (
        "_clock",
        "_sent_at",
        "_splitter",
        "_events",
        "first_output_at",
        "done",
        "malformed",
        "finish_seen",
        "finish_arrived",
        "first_error",
    )

    def __init__(self, clock: Clock, sent_at: float) -> None:
        self._clock = clock
        self._sent_at = sent_at
        self._splitter = SSESplitter()
        self._events: list[tuple[float, bytes, bool]] = []
        """(arrival, bytes, whole chunk?): an event's data, or a chunk of whole events to split in ``finish``."""
        self.first_output_at: float | None = None
        self.done = False
        """``data: [DONE]`` arrived: the stream is over, whatever the connection does next."""
        self.malformed = False
        """An event that is not JSON arrived before the first output."""
        self.finish_seen = False
        """A ``finish_reason`` arrived before any output: an empty answer, but a complete one."""
        self.finish_arrived = False
        """A non-null ``finish_reason`` arrived: the answer is complete, only usage and ``[DONE]`` may follow."""
        self.first_error: Any = None
        """The ``error`` object of an error event that came before any output (the stream's first word)."""

    def feed(self, chunk: bytes) -> None:
        """Note one relayed chunk. Cheap: no JSON once the first output has been seen.

        After the first output, a chunk of whole events with no ``[DONE]`` is kept as it is: only
        a ``finish_reason`` matters on the byte path (found with one scan of the chunk), and
        ``finish`` splits it into events later, each timed by its chunk's arrival as before.
        Anything else (a chunk that ends mid-event or may hold ``[DONE]``) is split at once.
        """
        now = self._clock()
        if (
            self.first_output_at is not None
            and chunk.endswith(b"\n\n")
            and not self._splitter.pending
            and DONE not in chunk
        ):
            self._events.append((now, chunk, True))
            if not self.finish_arrived and _FINISH_REASON.search(chunk) is not None:
                self.finish_arrived = True
            return
        for data in self._splitter.feed(chunk):
            self._note(now, data)

    def _note(self, now: float, data: bytes) -> None:
        if data == DONE:
            self.done = True
            return
        self._events.append((now, data, False))
        if not self.finish_arrived and _FINISH_REASON.search(data) is not None:
            self.finish_arrived = True
        if self.first_output_at is None:
            event = parse_event(data)
            if event is None:
                self.malformed = True
            elif _error_message(event) is not None:
                # An error event ends the first-token wait too; the relay decides whether it is
                # the request's fault (relayed) or the provider's (the next deployment is tried).
                self.first_output_at = now
                self.first_error = event["error"]
            elif any(_carries_output(c) for c in _choices(event)):
                self.first_output_at = now
            elif any(c.get("finish_reason") for c in _choices(event)):
                self.finish_seen = True

    def end_of_stream(self) -> None:
        """The upstream closed: complete an event that lacked only its closing blank line.

        An event cut short (its data not valid JSON) is dropped, as the SSE spec drops an event
        the stream ends in the middle of; the relay does not forward it either.
        """
        now = self._clock()
        for data in self._splitter.flush():
            if data == DONE or parse_event(data) is not None:
                self._note(now, data)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_output_at is None else self.first_output_at - self._sent_at

    def _timed_events(self) -> Iterator[tuple[float, bytes]]:
        """Every event's data with its arrival, the chunks kept whole split now."""
        for at, data, whole_chunk in self._events:
            if whole_chunk:
                for piece in SSESplitter().feed(data):
                    yield at, piece
            else:
                yield at, data

    def finish(self, counter: TokenCounter) -> Reading:
        """Work out the reading from everything seen. Call once, off the byte path."""
        answer: list[str] = []
        first_answer_at: float | None = None
        last_answer_at: float | None = None
        first_output_at: float | None = None
        usage_prompt: int | None = None
        usage_completion: int | None = None
        usage_cached: int | None = None
        finished = False
        error_message: str | None = None
        response_model: str | None = None
        malformed = False
        tool_calls = False
        timed = list(self._timed_events())
        parsed = _parse_all([data for _, data in timed])
        for (at, _), event in zip(timed, parsed, strict=True):
            if event is None:
                malformed = True
                continue
            if "error" in event:
                message = _error_message(event)
                if message is not None:
                    error_message = message
                    continue
            if response_model is None and isinstance(event.get("model"), str):
                response_model = event["model"]
            if "usage" in event:
                prompt, completion, cached = _usage(event)
                usage_prompt = prompt if prompt is not None else usage_prompt
                usage_completion = completion if completion is not None else usage_completion
                usage_cached = cached if cached is not None else usage_cached
            choices = event.get("choices")
            if choices.__class__ is not list:
                continue
            for choice in choices:
                if choice.__class__ is not dict:
                    continue
                delta = choice.get("delta")
                if delta.__class__ is dict and (delta.get("tool_calls") or delta.get("function_call")):
                    tool_calls = True
                text = _answer_of(choice)
                if text:
                    answer.append(text)
                    if first_answer_at is None:
                        first_answer_at = at
                    last_answer_at = at
                if first_output_at is None and _carries_output(choice):
                    first_output_at = at
                if choice.get("finish_reason"):
                    finished = True
        text = "".join(answer)
        tokens = counter.count(text)
        tokens_per_s = None
        if tokens >= 2 and first_answer_at is not None and last_answer_at is not None:
            window = last_answer_at - first_answer_at
            tokens_per_s = tokens / window if window > 0 else None
        sent = self._sent_at
        return Reading(
            ttft_s=None if first_output_at is None else first_output_at - sent,
            first_answer_s=None if first_answer_at is None else first_answer_at - sent,
            last_answer_s=None if last_answer_at is None else last_answer_at - sent,
            tokens_per_s=tokens_per_s,
            output_tokens=tokens,
            answer_text=text,
            usage_prompt_tokens=usage_prompt,
            usage_completion_tokens=usage_completion,
            usage_cached_tokens=usage_cached,
            finished=finished,
            saw_done=self.done,
            error_message=error_message,
            response_model=response_model,
            malformed=malformed,
            tool_calls=tool_calls,
        )


def read_full_reply(body: bytes, counter: TokenCounter) -> Reading:
    """The reading of a whole (non-streamed) JSON response: tokens and usage, no timings."""
    event = parse_event(body)
    if event is None:
        return Reading(malformed=True)
    text = "".join(_answer_of(choice) for choice in _choices(event))
    prompt, completion, cached = _usage(event)
    model = event.get("model")
    return Reading(
        output_tokens=counter.count(text),
        answer_text=text,
        usage_prompt_tokens=prompt,
        usage_completion_tokens=completion,
        usage_cached_tokens=cached,
        finished=True,
        error_message=_error_message(event),
        response_model=model if isinstance(model, str) else None,
    )
