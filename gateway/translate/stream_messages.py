"""The neutral stream events written as the Messages API streams them, for a client that speaks it.

``message_start``, then one content block at a time (``content_block_start``, its deltas,
``content_block_stop``) with indices from 0 in order, then ``message_delta`` (stop reason, and the
whole usage: a chat upstream reports its input only at the end, so ``message_start`` says the gateway's
estimate (``input_estimate``, the request's size made at intake: clients such as Claude Code read it to judge
the context) and ``message_delta`` carries the input, as Anthropic's own cumulative usage does) and
``message_stop``.
Reasoning becomes a ``thinking`` block with an empty signature (none can be made up); opaque reasoning a
``redacted_thinking`` block (another maker's sealed: ``gateway.translate.sealed``). Created per client stream, not
thread-safe.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects.messages import error_type
from gateway.translate import messages, messages_reply, sealed, tiers
from gateway.translate.common import dump_json
from gateway.translate.ir import (
    Ended,
    Event,
    Failed,
    Finished,
    Reasoning,
    ReasoningDelta,
    Started,
    StopReason,
    TextDelta,
    TierSeen,
    ToolCallStart,
    Usage,
    UsageSeen,
)
from gateway.translate.stream_write import WriterState


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {dump_json(data)}\n\n".encode()


class MessagesWriter(WriterState):
    def __init__(self, message_id: str, model: str, input_estimate: int = 0) -> None:
        super().__init__()
        self.message_id = message_id
        self.input_estimate = input_estimate
        self.model = model
        self._next = 0
        self._open: tuple[str, int] | None = None
        self._tools: dict[int, int] = {}
        self._stop: StopReason = "end"
        self._sequence: str | None = None
        self._usage = Usage()
        self._tier: str | None = None

    def write(self, event: Event) -> bytes:
        if isinstance(event, Failed):
            return self.error(event.message, event.status)
        if isinstance(event, Started):
            # ``model`` stays the client's own name, as a native answer shows it (``ProxyRequest.shown_model``).
            return self._start()
        if isinstance(event, Finished):
            self._stop, self._sequence = event.stop, event.stop_sequence
            return b""
        if isinstance(event, UsageSeen):
            self._usage = event.usage
            return b""
        if isinstance(event, TierSeen):
            self._tier = event.tier  # said with the usage: the start's, if it is not out yet, else the end's
            return b""
        if isinstance(event, Ended):
            return self.end()
        out = self._start()
        if isinstance(event, TextDelta):
            if not event.text:
                return out
            out += self._ensure("text", {"type": "text", "text": ""})
            return out + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, ReasoningDelta):
            return out + self._reasoning(event)
        if isinstance(event, ToolCallStart):
            block = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
            out += self._open_block("tool_use", block)
            assert self._open is not None
            self._tools[event.key] = self._open[1]
            return out
        index = self._tools.get(event.key)
        if index is None:
            out += self.write(ToolCallStart(event.key, f"call_{event.key}", ""))
            index = self._tools[event.key]
        data = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": event.text},
        }
        return out + sse("content_block_delta", data)

    def _reasoning(self, event: ReasoningDelta) -> bytes:
        out = b""
        if event.encrypted is not None:
            data = sealed.held(Reasoning("", encrypted=event.encrypted, maker=event.maker), "messages")
            if data is None:
                return out
            out += self._open_block("redacted_thinking", {"type": "redacted_thinking", "data": data})
            return out + self._close()
        if event.text:
            out += self._ensure("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out += self._delta({"type": "thinking_delta", "thinking": event.text})
        if event.signature and self._open is not None and self._open[0] == "thinking":
            out += self._delta({"type": "signature_delta", "signature": event.signature})
        return out

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_estimate, "output_tokens": 0},
        }
        tiers.write_served("messages", message, self._tier)
        return sse("message_start", {"type": "message_start", "message": message})

    def _ensure(self, kind: str, block: dict[str, Any]) -> bytes:
        if self._open is not None and self._open[0] == kind:
            return b""
        return self._open_block(kind, block)

    def _open_block(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._open = (kind, self._next)
        self._next += 1
        return out + sse(
            "content_block_start", {"type": "content_block_start", "index": self._open[1], "content_block": block}
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        index = self._open[1]
        self._open = None
        return sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        assert self._open is not None
        return sse("content_block_delta", {"type": "content_block_delta", "index": self._open[1], "delta": delta})

    def adopt_text_block(self, index: int) -> None:
        """The client has a text block open at ``index`` (from a stream it got natively): deltas go on in it."""
        self._open = ("text", index)
        self._next = index + 1

    def end(self) -> bytes:
        """What closes the client's stream now (nothing if it is closed): the open block, the stop, the usage."""
        if self.ended:
            return b""
        out = self._start() + self._close()
        self.ended = True
        usage = self.said_usage(self._usage)
        delta = {"stop_reason": messages.STOP_OF[self._stop], "stop_sequence": self._sequence}
        ending = {"type": "message_delta", "delta": delta, "usage": messages_reply.write_usage(usage)}
        tiers.write_served("messages", ending, self._tier)
        out += sse("message_delta", ending)
        return out + sse("message_stop", {"type": "message_stop"})

    def error(self, message: str, status: int = 500) -> bytes:
        self.ended = True
        error = {"type": "error", "error": {"type": error_type(status), "message": message}}
        return sse("error", error)
