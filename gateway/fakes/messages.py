"""The fake's Anthropic Messages API: ``POST /v1/messages`` whole and streamed, and ``…/count_tokens``.

The stream is the event sequence Anthropic sends: ``message_start``, a ``ping``, a ``thinking`` block
when asked (``thinking_delta`` then ``signature_delta``; with ``opaque_reasoning`` a ``redacted_thinking`` block
after it: ``gateway.fakes.reasoning``), the ``text`` block (``text_delta``) or a
``tool_use`` block (``input_json_delta`` pieces that join into valid JSON), ``message_delta`` with the
``stop_reason`` and the output usage, ``message_stop``. Errors use Anthropic's shape, and the key is
expected in ``x-api-key``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from starlette.types import Send

from gateway.fakes.asgi import Disconnect, send_json, sse
from gateway.fakes.behavior import FakeBehavior, FakeHost, answer_words
from gateway.fakes.cache import CURRENT
from gateway.fakes.chat import answer_plan, prefill_words, prompt_tokens
from gateway.fakes.ids import tool_call_id
from gateway.fakes.pacing import play
from gateway.fakes.quality import answer_of, args_tail
from gateway.fakes.reasoning import REDACTED, SIGNATURE
from gateway.fakes.reasoning import thinking_fault as thinking_fault
from gateway.fakes.tiers import served

_ids = itertools.count(1)
LIMITS = ("max_tokens",)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def input_usage(body: dict[str, Any]) -> dict[str, int]:
    """Anthropic's input usage: ``input_tokens`` leaves out what was read from the prompt cache."""
    use = CURRENT.get()
    prompt = use.prompt_tokens if use is not None else prompt_tokens(body)
    cached = use.cached_tokens if use is not None and use.usage_shape != "none" else 0
    return {"input_tokens": prompt - cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "overloaded_error" if status in (503, 529) else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


async def send_anthropic_error(
    send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_json(send, status, error_body(status, message), headers)


class MessagesScript:
    def __init__(self, host: FakeHost, body: dict[str, Any], behavior: FakeBehavior, model: str) -> None:
        self.host = host
        self.body = body
        self.behavior = behavior
        self.model = model
        self.id = f"msg_{host.name}_{next(_ids)}"
        _, self.length, finish = answer_plan(body, behavior, "/messages", LIMITS)
        self.stop_reason = "max_tokens" if finish == "length" else ("tool_use" if behavior.tool_call else "end_turn")
        self.tail = args_tail(behavior)
        self.redacted = behavior.reasoning_tokens > 0 and behavior.opaque_reasoning
        self.tool_use_id = tool_call_id(body, "toolu_") if behavior.tool_call else ""
        self.block = (1 if behavior.reasoning_tokens else 0) + self.redacted

    def opening(self) -> bytes:
        usage = {**input_usage(self.body), "output_tokens": 1, **served(self.body, anthropic=True)}
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return sse("message_start", {"type": "message_start", "message": message}) + sse("ping", {"type": "ping"})

    def reasoning(self, word: str, index: int) -> bytes:
        head = b""
        if index == 0:
            block = {"type": "thinking", "thinking": "", "signature": ""}
            head = sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        delta = {"type": "thinking_delta", "thinking": word}
        return head + sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})

    def prelude(self) -> bytes:
        out = b""
        if self.behavior.reasoning_tokens:
            signature = {"type": "signature_delta", "signature": SIGNATURE}
            out += sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": signature})
            out += sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        if self.redacted:
            redacted = {"type": "redacted_thinking", "data": REDACTED}
            out += sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": redacted})
            out += sse("content_block_stop", {"type": "content_block_stop", "index": 1})
        block: dict[str, Any] = {"type": "text", "text": ""}
        if self.behavior.tool_call:
            block = {"type": "tool_use", "id": self.tool_use_id, "name": self.behavior.tool_name, "input": {}}
        out += sse("content_block_start", {"type": "content_block_start", "index": self.block, "content_block": block})
        if self.behavior.tool_call:
            out += self._delta({"type": "input_json_delta", "partial_json": self.behavior.tool_args_head})
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": self.block, "delta": delta})

    def piece(self, text: str, first: bool) -> bytes:
        if self.behavior.tool_call:
            return self._delta({"type": "input_json_delta", "partial_json": text})
        return self._delta({"type": "text_delta", "text": text})

    def finish(self) -> bytes:
        closes = self.behavior.tool_call and self.tail
        out = self._delta({"type": "input_json_delta", "partial_json": self.tail}) if closes else b""
        out += sse("content_block_stop", {"type": "content_block_stop", "index": self.block})
        delta = {"stop_reason": self.stop_reason, "stop_sequence": None}
        usage = {"output_tokens": self.length + self.behavior.reasoning_tokens}
        return out + sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})

    def end(self, ending: bool) -> bytes:
        return sse("message_stop", {"type": "message_stop"}) if ending else b""

    def error_event(self) -> bytes:
        message = f"fake {self.host.name}: error mid-stream"
        kind = "invalid_request_error" if self.behavior.error_code == "invalid_request_error" else "overloaded_error"
        return sse("error", {"type": "error", "error": {"type": kind, "message": message}})

    def fail_event(self) -> bytes:
        return self.error_event()


async def create(
    host: FakeHost, send: Send, body: dict[str, Any], behavior: FakeBehavior, model: str, disconnect: Disconnect
) -> None:
    skip, length, _ = answer_plan(body, behavior, "/messages", LIMITS)
    words = answer_of(behavior, skip, length)
    script = MessagesScript(host, body, behavior, model)
    if body.get("stream") is True:
        await play(host, send, script, words, behavior, disconnect)
        return
    tps = host.jittered(behavior.tokens_per_s, behavior.tps_jitter)
    delay = host.jittered(behavior.ttft_s, behavior.ttft_jitter) + (length / tps if tps > 0 else 0.0)
    if await disconnect.sleep(delay):
        host.state.cancelled += 1
        return
    content: list[dict[str, Any]] = []
    if behavior.reasoning_tokens:
        thinking = "".join(answer_words(0, behavior.reasoning_tokens))
        content.append({"type": "thinking", "thinking": thinking, "signature": SIGNATURE})
        if script.redacted:
            content.append({"type": "redacted_thinking", "data": REDACTED})
    text = "".join(words)
    if behavior.tool_call:
        arguments = behavior.tool_args_head + text + script.tail
        # A whole body carries the input decoded: broken arguments arrive as a string where an object belongs.
        try:
            tool_input: Any = json.loads(arguments)
        except ValueError:
            tool_input = arguments
        tool_use = {"type": "tool_use", "id": script.tool_use_id, "name": behavior.tool_name, "input": tool_input}
        content.append(tool_use)
    else:
        content.append({"type": "text", "text": text})
    usage = {**input_usage(body), "output_tokens": length + behavior.reasoning_tokens, **served(body, anthropic=True)}
    message = {
        "id": script.id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": script.stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }
    host.state.completed += 1
    await send_json(send, 200, message)


async def count_tokens(send: Send, body: dict[str, Any]) -> None:
    await send_json(send, 200, {"input_tokens": prompt_tokens(body) + prefill_words(body, "/messages")})


__all__ = ["SIGNATURE", "count_tokens", "create", "error_body", "send_anthropic_error", "thinking_fault"]
