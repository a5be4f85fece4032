"""Chat and completions streams (and embeddings bodies): ``choices`` chunks, ``data: [DONE]``.

What real servers send and how it is read (each shape has a captured-stream test in
``tests/test_stream_shapes.py``):

- answer text: ``delta.content`` (chat), ``text`` (completions; Together repeats a chat chunk's content there,
  read once), tool-call arguments;
- reasoning: ``delta.reasoning_content`` (DeepSeek, old vLLM), ``delta.reasoning`` (vLLM, OpenRouter),
  ``delta.reasoning_details`` (OpenRouter: a chunk whose only output is there still starts the clock),
  ``thinking`` parts of a list ``content`` (Mistral's reasoning models, whose answer is then its ``text`` parts);
- usage: the ``usage`` object wherever it comes (an empty-``choices`` chunk, the last content chunk as
  DeepSeek sends it, every chunk as xAI does): the last one wins, so nothing is counted twice; Groq's
  ``x_groq.usage`` only when no standard ``usage`` came;
- errors: a top-level ``error`` (OpenAI, OpenRouter's mid-stream errors with ``finish_reason: "error"``,
  vLLM's ``{"object": "error", ...}`` inside it), and a ``finish_reason`` that says the provider failed
  (``chat_events.FAILED_FINISHES``: Mistral's ``error``, DeepSeek's ``insufficient_system_resource``);
- provider timings (``timings``: llama.cpp; ``metrics``: vLLM; ``x_groq.usage`` times; ``perf_metrics``:
  Fireworks): kept for the access log only, never for routing.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.dialects.base import FINISH, NOTHING, OUTPUT, Look, Tally, listed
from gateway.dialects.chat_body import tally_whole
from gateway.dialects.chat_events import (
    chat_stop,
    content_text,
    content_thinking,
    decode_chunks,
    failed_whole,
    note_calls,
    note_finish,
    reasoning_in_details,
    tally_chunks,
    usage_of,
)
from gateway.dialects.chat_native import READ_KEPT, tally_native
from gateway.dialects.chat_template import tally_kept
from gateway.dialects.scans import chat_finish
from gateway.errors import GatewayError, describe_error
from gateway.kept_chunks import KeptChunks
from gateway.samples import Endpoint

DONE = b"[DONE]"
_TIMING_SOURCES = ("timings", "metrics", "perf_metrics")
_TIMING_TAIL = 3
"""Providers put their timings on the last events: only that many are looked at."""


def choices_of(event: dict[str, Any]) -> list[dict[str, Any]]:
    choices = event.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def answer_of(choice: dict[str, Any]) -> str:
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
        return content if content.__class__ is str else content_text(content)
    parts: list[str] = []
    text = choice.get("text")  # /v1/completions; Together repeats a chat chunk's content there, beside its delta
    if isinstance(text, str) and not isinstance(delta, dict) and not isinstance(choice.get("message"), dict):
        parts.append(text)
    for holder in (choice.get("delta"), choice.get("message")):
        if not isinstance(holder, dict):
            continue
        parts.append(content_text(holder.get("content")))
        for call in listed(holder.get("tool_calls")):
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                parts.append(function["arguments"])
        function_call = holder.get("function_call")
        if isinstance(function_call, dict) and isinstance(function_call.get("arguments"), str):
            parts.append(function_call["arguments"])
    return "".join(parts)


def reasoning_of(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return reasoning_in_details(delta.get("reasoning_details")) or content_thinking(delta.get("content"))


_NOT_PLAIN_DELTA = frozenset(("tool_calls", "function_call", "reasoning_content", "reasoning", "reasoning_details"))
"""The delta's fields besides ``content`` that ``carries_output`` reads."""


def carries_output(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta")
    if (
        delta.__class__ is dict
        and _NOT_PLAIN_DELTA.isdisjoint(delta)
        and "text" not in choice
        and "message" not in choice
        and delta.get("content").__class__ is not list
    ):
        # The common streamed chunk (a role, text content): only non-empty text is output, what the reading
        # below comes to for it.
        content = delta.get("content")
        return content != "" if content.__class__ is str else bool(content_text(content))
    if answer_of(choice) or reasoning_of(choice):
        return True
    # A tool call's first delta may carry only its name, no arguments yet: that is output too.
    return isinstance(delta, dict) and bool(delta.get("tool_calls") or delta.get("function_call"))


def _error_message(event: dict[str, Any]) -> str | None:
    error = event.get("error")
    return None if error is None else describe_error(error)[0]


def _timings(tally: Tally, event: dict[str, Any]) -> None:
    for source in _TIMING_SOURCES:
        if source in event:
            tally.timing(source, event[source])
    groq = event.get("x_groq")
    if isinstance(groq, dict) and isinstance(groq.get("usage"), dict):
        times = {k: v for k, v in groq["usage"].items() if k.endswith("_time")}
        tally.timing("x_groq", times)


class ChatDialect:
    """Chat completions, completions and embeddings (whole bodies only for embeddings)."""

    done_data: bytes | None = DONE
    clean_end = b"data: [DONE]\n\n"
    keep_alive = b": keep-alive\n\n"
    end_mark: bytes | None = DONE

    def __init__(self, api: Endpoint) -> None:
        self.api = api

    def may_end(self, data: bytes) -> bool:
        return data.find(DONE) >= 0  # ``find``, not ``in`` (``gateway.sse``)

    may_finish = staticmethod(chat_finish)
    """A finish_reason with a value (not null): found with a scan (``gateway.dialects.scans``: C where built), so
    that no chunk is parsed after the first token. The scan itself, not a method around it: the meter calls it on
    every chunk until the finish."""

    def is_terminal(self, event: dict[str, Any]) -> bool:
        return False  # only [DONE] ends a chat stream, and it is no JSON event

    def first_look(self, event: dict[str, Any]) -> Look:
        error = event.get("error")
        if error is not None:
            # An error event ends the first-token wait too; the relay decides whether it is the
            # request's fault (relayed) or the provider's (the next deployment is tried).
            return Look("error", error)
        # ``choices_of`` and two ``any`` walked in one loop (read before every stream's first token).
        choices = event.get("choices")
        if not isinstance(choices, list):
            return NOTHING
        finish = False
        for choice in choices:
            if isinstance(choice, dict):
                if carries_output(choice):
                    return OUTPUT
                finish = finish or bool(choice.get("finish_reason"))
        return FINISH if finish else NOTHING

    def tally(
        self, events: list[tuple[float, dict[str, Any] | None]], into: Tally | None = None, final: bool = True
    ) -> Tally:
        tally = into if into is not None else Tally()
        for at, event in events:
            tally.next_event()
            if event is None:
                tally.malformed = True
                continue
            if "error" in event:
                message = _error_message(event)
                if message is not None:
                    tally.error_message = message
                    continue
            if tally.response_model is None and isinstance(event.get("model"), str):
                tally.response_model = event["model"]
            if "usage" in event and isinstance(event["usage"], dict):
                tally._standard_usage = True
                prompt, completion, cached = usage_of(event["usage"])
                tally.usage_prompt = prompt if prompt is not None else tally.usage_prompt
                tally.usage_completion = completion if completion is not None else tally.usage_completion
                tally.usage_cached = cached if cached is not None else tally.usage_cached
            elif "x_groq" in event:
                groq = event["x_groq"]
                if isinstance(groq, dict):
                    tally._groq_usage = groq.get("usage", tally._groq_usage)
            choices = event.get("choices")
            if choices.__class__ is not list:
                continue
            for choice in choices:
                if choice.__class__ is not dict:
                    continue
                delta = choice.get("delta")
                if delta.__class__ is dict and (delta.get("tool_calls") or delta.get("function_call")):
                    tally.tool_calls = True
                    note_calls(tally, choice.get("index"), delta.get("tool_calls"), delta.get("function_call"))
                text = answer_of(choice)
                if text:
                    tally.answered(text, at)
                elif carries_output(choice):
                    tally.output(at)
                if choice.get("finish_reason"):
                    note_finish(tally, choice["finish_reason"])
        if not final:
            return tally
        if not tally._standard_usage and tally._groq_usage is not None:
            # Groq's own usage, when the standard chunk was not asked for: the same numbers, read once.
            tally.usage_prompt, tally.usage_completion, tally.usage_cached = usage_of(tally._groq_usage)
        for _, event in events[-_TIMING_TAIL:]:
            if event is not None:
                _timings(tally, event)
        return tally

    def tally_array(
        self, array: bytes, times: list[float], into: Tally | None = None, final: bool = True
    ) -> Tally | None:
        events = decode_chunks(array)
        if events is None or len(events) != len(times):
            return None
        return tally_chunks(events, times, _TIMING_TAIL if final else 0, into)

    def tally_kept(self, entries: KeptChunks, into: Tally | None = None, final: bool = True) -> Tally | None:
        tail = _TIMING_TAIL if final else 0
        if READ_KEPT is not None:  # the C scan of the build (``chat_native``), else the template read alone
            tally = tally_native(entries, into, tail, READ_KEPT)
            if tally is not None:
                return tally
        return tally_kept(entries, into, tail)

    def tally_body(self, body: dict[str, Any]) -> Tally:
        tally = Tally(finished=True)
        choices = choices_of(body)
        tally.answer = [answer_of(choice) for choice in choices]
        for choice in choices:
            message = choice.get("message")
            if isinstance(message, dict) and (message.get("tool_calls") or message.get("function_call")):
                tally.tool_calls = True
                note_calls(tally, choice.get("index"), message.get("tool_calls"), message.get("function_call"))
            stop = chat_stop(choice.get("finish_reason"))
            tally.stop = stop if stop is not None else tally.stop
        tally.usage_prompt, tally.usage_completion, tally.usage_cached = usage_of(body.get("usage"))
        tally.error_message = _error_message(body) or failed_whole([c.get("finish_reason") for c in choices])
        if body.get("object") == "error" and tally.error_message is None:
            tally.error_message = describe_error(body)[0]  # vLLM's error body: {"object": "error", "message": ...}
        model = body.get("model")
        tally.response_model = model if isinstance(model, str) else None
        _timings(tally, body)
        return tally

    def tally_whole(self, body: bytes) -> Tally | None:
        return tally_whole(body)

    def error_of(self, event: dict[str, Any]) -> Any:
        return event.get("error")

    def opens_answer(self, event: dict[str, Any]) -> bool:
        return opens_answer(event)

    def render_error(self, error: GatewayError) -> bytes:
        return error.to_json()

    def stream_error(self, message: str, code: str, last_sequence: int | None) -> bytes:
        error = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
        return b"data: " + json.dumps(error).encode() + b"\n\n"

    def failed_stream(self, message: str, code: str, request_id: str, model: str) -> bytes:
        return self.stream_error(message, code, None)


def opens_answer(event: dict[str, Any]) -> bool:
    """Whether this chunk is where a continuation's answer starts: content, a finish, or usage."""
    if event.get("usage"):
        return True
    choices = event.get("choices")
    if not isinstance(choices, list):
        return True  # not a chunk the gateway understands: let the client judge it
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") or choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
            return True
    return False


def usage_only(event: dict[str, Any]) -> bool:
    """A chunk that holds usage and no choice (what ``include_usage`` adds at the end)."""
    return event.get("choices") == [] and isinstance(event.get("usage"), dict)
