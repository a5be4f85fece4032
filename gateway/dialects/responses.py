"""OpenAI's Responses API: typed events (``response.created`` ... ``response.completed``), no ``[DONE]``.

- First output: the first ``*.delta`` event that carries a delta (answer text, reasoning text or
  summary, function-call arguments, a refusal); ``response.created`` / ``response.in_progress`` and
  the item and part openings never count.
- First answer token: the first ``response.output_text.delta`` (or function-call arguments, a refusal).
- Usage from the terminal event's ``response.usage`` (``input_tokens``, ``output_tokens``,
  ``input_tokens_details.cached_tokens``).
- ``response.completed`` ends the stream cleanly; ``response.incomplete`` ends it too but is an outcome
  of its own (the request's limit or filter cut the answer), ``response.failed`` and a top-level ``error``
  event are errors: none of them is a clean completion.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from gateway.dialects.base import (
    FINISH,
    NOTHING,
    OUTPUT,
    DictReads,
    Look,
    StopReason,
    Tally,
    count,
    error_object,
    listed,
)
from gateway.errors import GatewayError, describe_error
from gateway.samples import Endpoint

_TERMINAL = re.compile(rb'"response\.(?:completed|incomplete|failed)"')
TERMINAL_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})
ANSWER_DELTAS = frozenset(
    {"response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta"}
)
TOOL_DELTAS = frozenset({"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})


def _delta(event: dict[str, Any]) -> str:
    delta = event.get("delta")
    return delta if isinstance(delta, str) else ""


def _usage(tally: Tally, response: object) -> None:
    if not isinstance(response, dict):
        return
    usage = response.get("usage")
    if isinstance(usage, dict):
        tally.usage_prompt = count(usage.get("input_tokens"))
        tally.usage_completion = count(usage.get("output_tokens"))
        details = usage.get("input_tokens_details")
        tally.usage_cached = count(details.get("cached_tokens")) if isinstance(details, dict) else None
    if tally.response_model is None and isinstance(response.get("model"), str):
        tally.response_model = response["model"]
    if tally.response_id is None and isinstance(response.get("id"), str):
        tally.response_id = response["id"]


def _stop_of(kind: object, response: object, tally: Tally) -> StopReason | None:
    """The stop reason a terminal status says: the Responses API has none of its own for a completed answer,
    so a completed one that calls a tool stopped for it (``wrong_stop`` cannot be told here)."""
    if kind in ("response.completed", "completed"):
        return "tool" if tally.calls else "stop"
    if kind in ("response.incomplete", "incomplete"):
        details = response.get("incomplete_details") if isinstance(response, dict) else None
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason == "max_output_tokens":
            return "length"
        return "filter" if reason == "content_filter" else "other"
    return None


def _output_index(event: dict[str, Any]) -> int:
    index = event.get("output_index")
    return index if isinstance(index, int) else 0


def failure_of(event: dict[str, Any]) -> Any:
    """The error object of ``response.failed`` (its ``response.error``) or of a top-level ``error`` event."""
    kind = event.get("type")
    if kind == "error":
        return error_object(event)
    if kind == "response.failed":
        response = event.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return error if error is not None else {"message": "the response failed", "code": "response_failed"}
    return None


class ResponsesDialect(DictReads):
    api: Endpoint = "responses"
    done_data: bytes | None = None
    clean_end = b""
    keep_alive = b": keep-alive\n\n"
    end_mark: bytes | None = None

    def may_end(self, data: bytes) -> bool:
        return _TERMINAL.search(data) is not None

    def may_finish(self, data: bytes) -> bool:
        return _TERMINAL.search(data) is not None

    def is_terminal(self, event: dict[str, Any]) -> bool:
        return event.get("type") in TERMINAL_TYPES

    def first_look(self, event: dict[str, Any]) -> Look:
        kind = event.get("type")
        if not isinstance(kind, str):
            return NOTHING
        if kind.endswith(".delta"):
            return OUTPUT if _delta(event) else NOTHING
        if kind == "response.created":
            response = event.get("response")
            rid = response.get("id") if isinstance(response, dict) else None
            return Look("none", response_id=rid if isinstance(rid, str) else None)
        failure = failure_of(event)
        if failure is not None:
            return Look("error", failure)
        if kind in TERMINAL_TYPES:
            return FINISH
        return NOTHING

    def tally(
        self, events: list[tuple[float, dict[str, Any] | None]], into: Tally | None = None, final: bool = True
    ) -> Tally:
        tally = into if into is not None else Tally()
        for at, event in events:
            tally.next_event()
            if event is None:
                tally.malformed = True
                continue
            sequence = event.get("sequence_number")
            if isinstance(sequence, int):
                tally.last_sequence = sequence
            kind = event.get("type")
            if not isinstance(kind, str):
                continue
            if kind.endswith(".delta"):
                text = _delta(event)
                if not text:
                    continue
                if kind in ANSWER_DELTAS:
                    tally.answered(text, at)
                else:
                    tally.output(at)
                if kind in TOOL_DELTAS:
                    tally.tool_calls = True
                    tally.call((0, _output_index(event)), None, text)
                continue
            if kind == "response.output_item.added":
                item = event.get("item")
                if isinstance(item, dict) and item.get("type") == "function_call":
                    tally.call((0, _output_index(event)), item.get("name"), None)
            elif kind == "response.created":
                _usage(tally, event.get("response"))
            elif kind in TERMINAL_TYPES:
                _usage(tally, event.get("response"))
                tally.finished = kind == "response.completed"
                tally.incomplete = kind == "response.incomplete"
                tally.stop = _stop_of(kind, event.get("response"), tally)
                tally.timing("timings", event.get("timings"))  # llama.cpp's own figures
            failure = failure_of(event)
            if failure is not None:
                tally.error_message = describe_error(failure)[0]
        return tally

    def tally_body(self, body: dict[str, Any]) -> Tally:
        tally = Tally(finished=True)
        _usage(tally, body)
        error = body.get("error")
        status = body.get("status")
        if error is not None:
            tally.error_message = describe_error(error)[0]
            tally.finished = False
        elif status == "failed":
            tally.error_message = "the response failed"
            tally.finished = False
        elif status == "incomplete":
            tally.incomplete = True
            tally.finished = False
        for index, item in enumerate(listed(body.get("output"))):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call" and isinstance(item.get("arguments"), str):
                tally.answer.append(item["arguments"])
                tally.tool_calls = True
                tally.call((0, index), item.get("name"), item["arguments"])
            for part in listed(item.get("content")):
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    text = part.get("text", part.get("refusal"))
                    if isinstance(text, str):
                        tally.answer.append(text)
        if error is None and status != "failed":
            tally.stop = _stop_of(status, body, tally)
        tally.timing("timings", body.get("timings"))
        return tally

    def error_of(self, event: dict[str, Any]) -> Any:
        return failure_of(event)

    def opens_answer(self, event: dict[str, Any]) -> bool:
        return True  # never continued: recovery does not apply to the Responses API

    def render_error(self, error: GatewayError) -> bytes:
        return error.to_json()

    def stream_error(self, message: str, code: str, last_sequence: int | None) -> bytes:
        event: dict[str, Any] = {"type": "error", "code": code, "message": message, "param": None}
        event["sequence_number"] = 0 if last_sequence is None else last_sequence + 1
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"

    def failed_stream(self, message: str, code: str, request_id: str, model: str) -> bytes:
        # The SDKs' stream readers want ``response.created`` first: a created response that failed.
        response: dict[str, Any] = {
            "id": f"resp_gw_{request_id}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": model,
            "output": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": None,
            "top_p": None,
            "tool_choice": "auto",
            "tools": [],
        }
        created = {"type": "response.created", "response": response, "sequence_number": 0}
        failed_response = {**response, "status": "failed", "error": {"code": code, "message": message}}
        failed = {"type": "response.failed", "response": failed_response, "sequence_number": 1}
        return (
            b"event: response.created\ndata: "
            + json.dumps(created).encode()
            + b"\n\nevent: response.failed\ndata: "
            + json.dumps(failed).encode()
            + b"\n\n"
        )
