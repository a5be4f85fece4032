"""Anthropic's Messages API: ``message_start``, content blocks, ``message_delta``, ``message_stop``.

- First output: the first ``content_block_delta`` that carries something: ``text_delta`` (answer),
  ``thinking_delta`` (reasoning), ``input_json_delta`` (a tool call's input). ``event: ping`` and SSE
  comments never count; ``signature_delta`` is no output of its own.
- Usage: ``message_start``'s ``message.usage`` (input, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``), then ``message_delta``'s ``usage`` (output, and input where a
  compatible host reports it there). Anthropic's ``input_tokens`` leaves the cached part out: the
  prompt is their sum.
- ``message_delta`` with a ``stop_reason`` completes the answer; ``message_stop`` ends the stream; an
  ``error`` event after the 200 is a broken stream.
- Errors use Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
import re
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

_STOP = b'"message_stop"'
_STOP_KEY = b'"stop_reason"'
_STOP_REASON = re.compile(rb'"stop_reason"\s*:\s*"')
_DELTA_TEXT = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error types by status; anything else is an ``api_error`` (5xx) or ``invalid_request_error``."""
MESSAGES_STOPS: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool",
    "refusal": "filter",
}
"""``stop_reason`` values in the shared vocabulary (``pause_turn`` and anything newer: ``other``)."""


def named(body: bytes, model: str) -> bytes:
    """A whole Messages answer naming ``model`` as the model that answered (``ProxyRequest.shown_model``); a body
    that is no message (an error) as it came."""
    try:
        message = json.loads(body)
    except ValueError:
        return body
    if not isinstance(message, dict) or message.get("type") != "message" or message.get("model") == model:
        return body
    message["model"] = model
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def messages_stop(value: object) -> StopReason | None:
    if not isinstance(value, str) or not value:
        return None
    return MESSAGES_STOPS.get(value, "other")


def _block_index(event: dict[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else 0


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(status: int, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": error_type(status), "message": message}}).encode()


def is_anthropic_error(body: bytes) -> bool:
    """Whether ``body`` is an error in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``).
    A server that speaks the Messages API may still answer its errors in OpenAI's shape (llama.cpp's does):
    such a body is re-shaped before an Anthropic client gets it. Parses; only for error bodies."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    error = data.get("error") if isinstance(data, dict) else None
    return data.get("type") == "error" and isinstance(error, dict) and isinstance(error.get("message"), str)


def _usage(tally: Tally, usage: object) -> None:
    if not isinstance(usage, dict):
        return
    for key, name in (
        ("input_tokens", "usage_prompt"),
        ("output_tokens", "usage_completion"),
        ("cache_read_input_tokens", "usage_cached"),
        ("cache_creation_input_tokens", "usage_cache_creation"),
    ):
        value = count(usage.get(key))
        if value is not None:
            setattr(tally, name, value)


def _prompt_total(tally: Tally) -> None:
    """Anthropic's ``input_tokens`` excludes cache reads and writes; the gateway's prompt includes them."""
    if tally.usage_prompt is not None:
        tally.usage_prompt += (tally.usage_cached or 0) + (tally.usage_cache_creation or 0)


class MessagesDialect(DictReads):
    api: Endpoint = "messages"
    done_data: bytes | None = None
    clean_end = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    keep_alive = b'event: ping\ndata: {"type": "ping"}\n\n'

    end_mark: bytes | None = _STOP

    def may_end(self, data: bytes) -> bool:
        return data.find(_STOP) >= 0  # ``find``, not ``in`` (``gateway.sse``)

    def may_finish(self, data: bytes) -> bool:
        # Most events (the content deltas) have no ``stop_reason`` at all: one find, no regex.
        return data.find(_STOP_KEY) >= 0 and _STOP_REASON.search(data) is not None

    def is_terminal(self, event: dict[str, Any]) -> bool:
        return event.get("type") == "message_stop"

    def first_look(self, event: dict[str, Any]) -> Look:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict):
                kind = delta.get("type")
                key = _DELTA_TEXT.get(kind) if isinstance(kind, str) else None
                if key is not None and delta.get(key):
                    return OUTPUT
            return NOTHING
        if kind == "error":
            return Look("error", error_object(event))
        if kind == "message_stop":
            return FINISH
        if kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
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
            kind = event.get("type")
            if kind == "content_block_delta":
                delta = event.get("delta")
                if not isinstance(delta, dict):
                    continue
                delta_type = delta.get("type")
                key = _DELTA_TEXT.get(delta_type if isinstance(delta_type, str) else "")
                text = delta.get(key) if key is not None else None
                if not isinstance(text, str) or not text:
                    continue
                if delta_type == "thinking_delta":
                    tally.output(at)
                else:
                    tally.answered(text, at)
                    if delta_type == "input_json_delta":
                        tally.tool_calls = True
                        tally.call((0, _block_index(event)), None, text)
            elif kind == "content_block_start":
                block = event.get("content_block")
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    tally.call((0, _block_index(event)), block.get("name"), None)
            elif kind == "message_start":
                message = event.get("message")
                if isinstance(message, dict):
                    _usage(tally, message.get("usage"))
                    if isinstance(message.get("model"), str):
                        tally.response_model = message["model"]
                    if isinstance(message.get("id"), str):
                        tally.response_id = message["id"]
            elif kind == "message_delta":
                _usage(tally, event.get("usage"))
                delta = event.get("delta")
                if isinstance(delta, dict) and delta.get("stop_reason"):
                    tally.finished = True
                    tally.stop = messages_stop(delta["stop_reason"])
            elif kind == "error":
                tally.error_message = describe_error(event.get("error", event))[0]
        if final:
            _prompt_total(tally)
        return tally

    def tally_body(self, body: dict[str, Any]) -> Tally:
        tally = Tally(finished=True)
        if body.get("type") == "error":
            tally.error_message = describe_error(body.get("error", body))[0]
            tally.finished = False
            return tally
        _usage(tally, body.get("usage"))
        _prompt_total(tally)
        if isinstance(body.get("model"), str):
            tally.response_model = body["model"]
        for index, block in enumerate(listed(body.get("content"))):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                tally.answer.append(block["text"])
            elif block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
                tally.answer.append(arguments)
                tally.tool_calls = True
                tally.call((0, index), block.get("name"), arguments)
        tally.stop = messages_stop(body.get("stop_reason"))
        return tally

    def opens_answer(self, event: dict[str, Any]) -> bool:
        # A continuation repeats message_start, ping and the text block's opening: the client has them.
        return event.get("type") not in ("message_start", "ping", "content_block_start")

    def error_of(self, event: dict[str, Any]) -> Any:
        if event.get("type") != "error":
            return None
        return error_object(event)

    def render_error(self, error: GatewayError) -> bytes:
        return anthropic_error(error.status_code, error.message)

    def stream_error(self, message: str, code: str, last_sequence: int | None) -> bytes:
        return b"event: error\ndata: " + anthropic_error(500, message) + b"\n\n"

    def failed_stream(self, message: str, code: str, request_id: str, model: str) -> bytes:
        return self.stream_error(message, code, None)
