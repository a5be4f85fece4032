"""The meter's fast read of a finished chat stream: typed events holding only what the tally reads.

``ChatDialect.tally`` reads decoded dicts, and building every event's dict (its ``id``, ``object``,
``created``, ``index``, ``logprobs`` ...) was most of the cost of ``StreamMeter.finish``. Decoded
into these ``msgspec`` structs, the fields the tally never reads are skipped by the decoder.

The structs accept only the shapes real streams send (an object per event, ``choices`` a list
of objects, ``delta`` an object); anything else fails to decode and the stream is read by
``ChatDialect.tally`` over dicts, which stays the definition. Where this read takes a stream it
gives the same ``Tally``: each field below is read exactly as the dict path reads its key, an
absent key and a ``null`` read alike (every check in the dict path treats them the same), and
the fields read loosely there (``usage``, ``tool_calls``, timings) are kept as decoded values
(``Any``) and read by the same helpers. ``tests/test_meter_typed.py`` holds the two to each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import msgspec

from gateway.dialects.base import StopReason, Tally, count, listed
from gateway.errors import describe_error


class ChatDelta(msgspec.Struct, gc=False):
    content: str | None = None
    tool_calls: Any = None
    function_call: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    reasoning_details: Any = None


class ChatChoice(msgspec.Struct, gc=False):
    delta: ChatDelta | None = None
    index: Any = None
    finish_reason: Any = None
    text: Any = None
    message: Any = None


class ChatChunk(msgspec.Struct, gc=False):
    choices: list[ChatChoice] | None = None
    model: Any = None
    usage: Any = None
    error: Any = None
    x_groq: Any = None
    timings: Any = None
    metrics: Any = None
    perf_metrics: Any = None


_DECODER = msgspec.json.Decoder(list[ChatChunk])
CHAT_STOPS: dict[str, StopReason] = {
    "stop": "stop",
    "eos": "stop",  # Together
    "eos_token": "stop",  # TGI before 2.2
    "stop_sequence": "stop",  # TGI before 2.2
    "end_turn": "stop",
    "length": "length",
    "model_length": "length",  # Mistral: the model's context, not the request's limit, ended the answer
    "tool_calls": "tool",
    "function_call": "tool",
    "content_filter": "filter",
}
"""``finish_reason`` values in the shared vocabulary (OpenAI's, and the others OpenAI-compatible hosts send): the
meter's and the translators' one reading of a chat answer's end."""


FAILED_FINISHES = frozenset({"error", "insufficient_system_resource"})
"""``finish_reason`` values that say the provider failed mid-answer (OpenRouter's and Mistral's ``error``, DeepSeek's
``insufficient_system_resource``): the answer ended unfinished, an error, never a complete answer."""


def finish_failure(reason: object) -> str | None:
    """The error a ``finish_reason`` says ended the answer (one of ``FAILED_FINISHES``), else None."""
    if isinstance(reason, str) and reason in FAILED_FINISHES:
        return f"the provider ended the answer with finish_reason {reason!r}"
    return None


def note_finish(tally: Tally, reason: object) -> None:
    """A choice's ``finish_reason`` (not null) in the tally: the answer ended and why, or, for a ``FAILED_FINISHES``
    reason, the error that ended it (unless the stream's own error event said more)."""
    failure = finish_failure(reason)
    if failure is not None:
        tally.error_message = tally.error_message or failure
        return
    tally.finished = True
    tally.stop = chat_stop(reason)


def failed_whole(reasons: Sequence[object]) -> str | None:
    """The error of a whole answer whose choices' ``finish_reason`` says the provider failed, else None."""
    return next((failure for reason in reasons if (failure := finish_failure(reason)) is not None), None)


def chat_stop(value: object) -> StopReason | None:
    """A ``finish_reason`` read into ``StopReason`` (None: not a reason at all)."""
    if not isinstance(value, str) or not value:
        return None
    return CHAT_STOPS.get(value, "other")


def note_calls(tally: Tally, choice_index: object, tool_calls: object, function_call: object) -> None:
    """The tool-call parts of one ``delta`` or ``message`` (``tool_calls``, or the legacy ``function_call``)."""
    choice = choice_index if isinstance(choice_index, int) else 0
    if isinstance(tool_calls, list):
        for position, call in enumerate(tool_calls):
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            key = (choice, index if isinstance(index, int) else position)
            if "extra_content" in call and not tally.thought_signed:
                tally.thought_signed = _thought_signed(call["extra_content"])
            function = call.get("function")
            if isinstance(function, dict):
                tally.call(key, function.get("name"), function.get("arguments"))
            else:
                tally.call(key, None, None)
    if isinstance(function_call, dict):
        tally.call((choice, -1), function_call.get("name"), function_call.get("arguments"))


def _thought_signed(extra: object) -> bool:
    """Whether a tool call's ``extra_content`` holds Gemini's thought signature: its deployment wants it back."""
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return isinstance(signature, str) and bool(signature)


def decode_chunks(array: bytes) -> list[ChatChunk] | None:
    """A JSON array of chat chunks, or None when any element is not the shape above (or not JSON)."""
    try:
        return _DECODER.decode(array)
    except msgspec.MsgspecError:
        return None


def content_text(content: object) -> str:
    """The answer text of a message's or delta's ``content``: the string, or the ``text`` parts of a list of parts
    (Mistral's reasoning models send ``[{"type": "thinking", ...}, {"type": "text", "text": ...}]``)."""
    if isinstance(content, str):
        return content
    return "".join(_texts(p for p in listed(content) if isinstance(p, dict) and p.get("type") == "text"))


def content_thinking(content: object) -> str:
    """The reasoning text in a list of content parts: Mistral's ``{"type": "thinking", "thinking": [{"type":
    "text", "text": ...}]}`` parts ("" for a string content)."""
    thinking = (p for p in listed(content) if isinstance(p, dict) and p.get("type") == "thinking")
    return "".join(_texts(chunk for part in thinking for chunk in listed(part.get("thinking"))))


def _texts(parts: Iterable[Any]) -> Iterator[str]:
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            yield part["text"]


def usage_of(usage: object) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and cached prompt tokens of a ``usage`` object (None where not reported).

    Cached prompt tokens come in each shape providers report them: OpenAI's
    ``prompt_tokens_details.cached_tokens``, DeepSeek's ``prompt_cache_hit_tokens``, and the
    Anthropic-style ``cache_read_input_tokens`` some OpenAI-compatible hosts use.
    """
    if not isinstance(usage, dict):
        return None, None, None
    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None:
        cached = count(usage.get("prompt_cache_hit_tokens"))
    if cached is None:
        cached = count(usage.get("cache_read_input_tokens"))
    return count(usage.get("prompt_tokens")), count(usage.get("completion_tokens")), cached


def _holder_parts(parts: list[str], content: Any, tool_calls: Any, function_call: Any) -> None:
    """What a ``delta`` or ``message`` adds to the answer: its content, then tool-call arguments."""
    parts.append(content_text(content))
    for call in listed(tool_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            parts.append(function["arguments"])
    if isinstance(function_call, dict) and isinstance(function_call.get("arguments"), str):
        parts.append(function_call["arguments"])


def answer_of(choice: ChatChoice) -> str:
    """``chat.answer_of`` of the same choice."""
    delta = choice.delta
    if delta is not None and delta.tool_calls is None and delta.function_call is None:
        if choice.text is None and choice.message is None:
            return delta.content or ""
    parts: list[str] = []
    if isinstance(choice.text, str) and delta is None and not isinstance(choice.message, dict):
        parts.append(choice.text)  # a completions choice's; a chat choice's repeats its content (Together)
    if delta is not None:
        _holder_parts(parts, delta.content, delta.tool_calls, delta.function_call)
    message = choice.message
    if isinstance(message, dict):
        _holder_parts(parts, message.get("content"), message.get("tool_calls"), message.get("function_call"))
    return "".join(parts)


def reasoning_of(delta: ChatDelta | None) -> str:
    """``chat.reasoning_of`` of the same choice."""
    if delta is None:
        return ""
    for value in (delta.reasoning_content, delta.reasoning):
        if isinstance(value, str) and value:
            return value
    return reasoning_in_details(delta.reasoning_details)


def reasoning_in_details(details: object) -> str:
    """The first text of OpenRouter's ``reasoning_details``: [{"type": "reasoning.text", "text": ...},
    {"type": "reasoning.summary", "summary": ...}, {"type": "reasoning.encrypted", "data": ...}]; any of them
    is the model at work."""
    if isinstance(details, list):
        for detail in details:
            if isinstance(detail, dict):
                for key in ("text", "summary", "data"):
                    value = detail.get(key)
                    if isinstance(value, str) and value:
                        return value
    return ""


def tally_chunks(
    events: Sequence[ChatChunk | str],
    times: list[float],
    timing_tail: int,
    into: Tally | None = None,
    model: str | None = None,
    reasoning: bool = False,
) -> Tally:
    """``ChatDialect.tally`` of the same events, ``times[i]`` the arrival of ``events[i]``, on from ``into``;
    ``timing_tail`` 0: the stream goes on (``final=False``: nothing read from its end yet).

    An event given as a string is an answer event of the stream's one shape (``chat_template``), given as its
    ``delta.content`` alone: its ``model`` is ``model``, and ``reasoning`` says whether its delta holds reasoning;
    it says nothing else (no error, usage, tool call, finish or timings).
    """
    tally = into if into is not None else Tally()
    answer, output_events = tally.answer, tally.output_events  # never replaced while a batch is read
    for at, event in zip(times, events, strict=True):
        if isinstance(event, str):
            # The common chunk below, its checks made once for its shape: only its text can be output.
            if tally.response_model is None:
                tally.response_model = model
            if event:
                answer.append(event)
                if tally.first_answer_at is None:
                    tally.first_answer_at = at
                tally.last_answer_at = at
                if tally.first_output_at is None:
                    tally.first_output_at = at
                tally._event_counted = True
                output_events.append(at)
            else:
                tally._event_counted = False
                if reasoning:
                    tally.output(at)
            continue
        tally._event_counted = False  # ``tally.next_event()``, inlined: once per event of every stream
        if event.error is not None:
            message = describe_error(event.error)[0]
            if message is not None:
                tally.error_message = message
                continue
        if tally.response_model is None and isinstance(event.model, str):
            tally.response_model = event.model
        usage = event.usage
        if isinstance(usage, dict):
            tally._standard_usage = True
            prompt, completion, cached = usage_of(usage)
            tally.usage_prompt = prompt if prompt is not None else tally.usage_prompt
            tally.usage_completion = completion if completion is not None else tally.usage_completion
            tally.usage_cached = cached if cached is not None else tally.usage_cached
        elif isinstance(event.x_groq, dict):
            tally._groq_usage = event.x_groq.get("usage", tally._groq_usage)
        if event.choices is None:
            continue
        for choice in event.choices:
            delta = choice.delta
            if (
                delta is not None
                and delta.tool_calls is None
                and delta.function_call is None
                and choice.text is None
                and choice.message is None
            ):
                # The common chunk: only delta.content can be answer text, no tool call.
                if delta.content:
                    # ``tally.answered(delta.content, at)``, inlined: every answer event of a stream comes here.
                    answer.append(delta.content)
                    if tally.first_answer_at is None:
                        tally.first_answer_at = at
                    tally.last_answer_at = at
                    if tally.first_output_at is None:
                        tally.first_output_at = at
                    if not tally._event_counted:
                        tally._event_counted = True
                        output_events.append(at)
                elif reasoning_of(delta):
                    tally.output(at)
            else:
                if delta is not None and (delta.tool_calls or delta.function_call):
                    tally.tool_calls = True
                    note_calls(tally, choice.index, delta.tool_calls, delta.function_call)
                text = answer_of(choice)
                if text:
                    tally.answered(text, at)
                elif reasoning_of(delta) or (delta is not None and bool(delta.tool_calls or delta.function_call)):
                    tally.output(at)  # chat.carries_output, its answer_of already found empty
            if choice.finish_reason:
                note_finish(tally, choice.finish_reason)
    if timing_tail:
        read_end(tally, events[-timing_tail:])
    return tally


def answered_texts(tally: Tally, texts: list[str], times: list[float], model: str | None) -> None:
    """``tally_chunks`` of answer events of the stream's one shape whose texts are all non-empty, at once."""
    if tally.response_model is None:
        tally.response_model = model
    tally.answer += texts
    if tally.first_answer_at is None:
        tally.first_answer_at = times[0]
    tally.last_answer_at = times[-1]
    if tally.first_output_at is None:
        tally.first_output_at = times[0]
    tally._event_counted = True
    tally.output_events.extend(times)


def read_end(tally: Tally, last: Sequence[ChatChunk | str]) -> None:
    """What is read from a stream's end: Groq's usage when no standard usage came, the timings of its ``last``
    events."""
    if not tally._standard_usage and tally._groq_usage is not None:
        tally.usage_prompt, tally.usage_completion, tally.usage_cached = usage_of(tally._groq_usage)
    for event in last:
        if isinstance(event, str):
            continue  # an answer event of the stream's shape: no timings
        read_timings(tally, event)


class Timed(Protocol):
    """A decoded chunk or whole body (``ChatChunk``, ``chat_body.ChatBody``): the fields providers put timings in."""

    timings: Any
    metrics: Any
    perf_metrics: Any
    x_groq: Any


def read_timings(tally: Tally, event: Timed) -> None:
    """``chat._timings`` of a decoded chunk or body, in its order: ``tally.timing`` of each source, which keeps only a
    non-empty dict (a source present as null is no timing either; most events have none of them)."""
    if event.timings is not None:
        tally.timing("timings", event.timings)
    if event.metrics is not None:
        tally.timing("metrics", event.metrics)
    if event.perf_metrics is not None:
        tally.timing("perf_metrics", event.perf_metrics)
    groq = event.x_groq
    if isinstance(groq, dict) and isinstance(groq.get("usage"), dict):
        tally.timing("x_groq", {k: v for k, v in groq["usage"].items() if k.endswith("_time")})
