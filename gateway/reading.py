"""What the meter read of one response (``Reading``), and how a tally or a whole body becomes one.

``gateway.meter.StreamMeter`` builds a ``Reading`` at a stream's finish; ``read_full_reply`` reads a
whole (non-streamed) JSON body. Both read a dialect's ``Tally`` alike (``read_full_reply`` is ``reading_of``
with no times, written out): the token count is the pinned tokenizer's, tokens per second as DESIGN.md defines it.
"""

from __future__ import annotations

from operator import sub
from typing import Any

import msgspec

from gateway.dialects import CHAT, Dialect, Tally
from gateway.dialects.base import StopReason, ToolCall
from gateway.sse import parse_event
from gateway.tokens import TokenCounter


class Reading(msgspec.Struct, frozen=True, gc=False):
    """What the meter saw of one response; times are seconds from the upstream request.

    A frozen ``msgspec.Struct`` rather than a frozen dataclass: one is built per attempt, and the dataclass's
    ``__init__`` (an ``object.__setattr__`` per field) cost five times as much. Change one with
    ``msgspec.structs.replace``.
    """

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
    usage_cache_creation_tokens: int | None = None
    """Prompt tokens the provider wrote to its prompt cache (Messages API; part of ``usage_prompt_tokens``)."""
    finished: bool = False
    """The answer is complete (a ``finish_reason``, ``response.completed``, a ``stop_reason``), even if the
    stream's own ending did not follow."""
    incomplete: bool = False
    """The provider ended the answer early for the request's own reason (Responses ``response.incomplete``:
    ``max_output_tokens``, a content filter): an outcome of its own, not a clean completion."""
    saw_done: bool = False
    error_message: str | None = None
    """The message of an error event the provider sent inside the stream."""
    response_model: str | None = None
    """The model id the provider reported answering with."""
    response_id: str | None = None
    """The id the provider gave the response (Responses API: what ``previous_response_id`` names)."""
    malformed: bool = False
    """An event (or the whole body) was not JSON: the client cannot have read a complete answer."""
    tool_calls: bool = False
    """The answer holds a tool (or function) call: its text is arguments, not content."""
    provider_timings: dict[str, Any] | None = None
    """The provider's own figures (llama.cpp ``timings``, vLLM ``metrics``, Groq ``x_groq``, Fireworks
    ``perf_metrics``), by their name: for the access log, never for routing."""
    last_sequence: int | None = None
    """The last ``sequence_number`` seen (Responses API), so that an error event can follow it."""
    chunk_gaps_s: tuple[float, ...] = ()
    """Seconds between the arrivals of consecutive events that carried output, after the first (streams only;
    events that came in one read are 0 apart)."""
    calls: tuple[ToolCall, ...] = ()
    """The answer's tool calls, each with its name and its arguments as sent (what the validity check parses)."""
    stop: StopReason | None = None
    """Why the answer ended, in the shared vocabulary (None: the provider did not say)."""
    thought_signed: bool = False
    """A chat tool call carried a thought signature: its deployment (Gemini) refuses a call sent back without one
    (``UpstreamClient.thought_signers``)."""


def reading_of(tally: Tally, counter: TokenCounter, sent: float, saw_done: bool) -> Reading:
    """The reading of what a dialect tallied of one response; times are made relative to ``sent``."""
    text = "".join(tally.answer)
    tokens = counter.count(text)
    events = tally.output_events
    tokens_per_s = None
    first, last = tally.first_answer_at, tally.last_answer_at
    if tokens >= 2 and first is not None and last is not None:
        window = last - first
        tokens_per_s = tokens / window if window > 0 else None
    times = (
        None if tally.first_output_at is None else tally.first_output_at - sent,
        None if first is None else first - sent,
        None if last is None else last - sent,
        tokens_per_s,
    )
    # Each later arrival less the one before it, in C (a generator frame per stream cost several µs).
    gaps = tuple(map(sub, events[1:], events))
    return _reading(tally, text, tokens, times, saw_done, tally.malformed, tally.last_sequence, gaps)


def read_full_reply(body: bytes, counter: TokenCounter, dialect: Dialect = CHAT) -> Reading:
    """The reading of a whole (non-streamed) JSON response: tokens and usage, no timings.

    ``reading_of`` of the body's tally with no times in it (a whole body has none), built at once: the same
    fields, no ``Reading`` with empty timings made first and copied.
    """
    tally = dialect.tally_whole(body)
    if tally is None:
        event = parse_event(body)
        if event is None:
            return Reading(malformed=True)
        tally = dialect.tally_body(event)
    text = "".join(tally.answer)
    return _reading(tally, text, counter.count(text), _NO_TIMES, False, False, None, ())


_NO_TIMES: tuple[None, None, None, None] = (None, None, None, None)
"""A whole body's first token, first and last answer and tokens per second: none."""


def _reading(
    tally: Tally,
    text: str,
    tokens: int,
    times: tuple[float | None, float | None, float | None, float | None],
    saw_done: bool,
    malformed: bool,
    last_sequence: int | None,
    gaps: tuple[float, ...],
) -> Reading:
    """The ``Reading`` of ``tally``: ``times`` (first token, first and last answer, tokens per second) and the rest
    given; every field in order, positionally (matching two dozen keywords cost more than building the struct)."""
    return Reading(
        *times,  # ttft_s, first_answer_s, last_answer_s, tokens_per_s
        tokens,  # output_tokens
        text,  # answer_text
        tally.usage_prompt,  # usage_prompt_tokens
        tally.usage_completion,  # usage_completion_tokens
        tally.usage_cached,  # usage_cached_tokens
        tally.usage_cache_creation,  # usage_cache_creation_tokens
        tally.finished,  # finished
        tally.incomplete,  # incomplete
        saw_done,  # saw_done
        tally.error_message,  # error_message
        tally.response_model,  # response_model
        tally.response_id,  # response_id
        malformed,  # malformed
        tally.tool_calls,  # tool_calls
        tally.provider_timings,  # provider_timings
        last_sequence,  # last_sequence
        gaps,  # chunk_gaps_s
        tally.tool_call_list() if tally.calls else (),  # calls
        tally.stop,  # stop
        tally.thought_signed,  # thought_signed
    )
