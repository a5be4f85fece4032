"""The neutral stream events written as chat completion chunks, for a client that speaks chat.

A role chunk first, then ``delta.content`` / ``delta.reasoning_content`` / ``delta.tool_calls``
(each call with its own index from 0, its id and name on its first delta, with a chat provider's thought signature
as that provider gave it: ``extra_content``), a chunk with the
``finish_reason``, the usage chunk (empty ``choices``) only if the client asked for it
(``stream_options.include_usage``), and ``data: [DONE]``. Created per client stream.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.translate import chat, chat_reply, tiers
from gateway.translate.chat_assistant import signed
from gateway.translate.common import dump_json
from gateway.translate.ir import (
    Ended,
    Event,
    Failed,
    Finished,
    ReasoningDelta,
    Started,
    StopReason,
    TextDelta,
    TierSeen,
    ToolArgsDelta,
    ToolCallStart,
    Usage,
    UsageSeen,
)
from gateway.translate.stream_write import WriterState

DONE = b"data: [DONE]\n\n"


class ChatWriter(WriterState):
    def __init__(self, completion_id: str, model: str, *, include_usage: bool) -> None:
        super().__init__()
        self.head: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self.include_usage = include_usage
        self._finished = False
        self._tools: dict[int, int] = {}
        self._stop: StopReason = "end"
        self._usage: Usage | None = None
        self._signature: str | None = None
        """A chat provider's thought signature, for the next tool call's first delta."""

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + dump_json({**self.head, "choices": choices, **extra}).encode() + b"\n\n"

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._start() + self._chunk([{"index": 0, "delta": delta, "finish_reason": None}])

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return self._chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])

    def write(self, event: Event) -> bytes:
        if isinstance(event, Failed):
            return self.error(event.message, event.status, event.code)
        if isinstance(event, Started):
            if event.model and not self.started:
                self.head["model"] = event.model
            return self._start()
        if isinstance(event, TextDelta):
            return self._delta({"content": event.text}) if event.text else b""
        if isinstance(event, ReasoningDelta):
            if event.encrypted is not None and event.maker == "chat":
                self._signature = event.encrypted  # rides on the call that follows
            return self._delta({"reasoning_content": event.text}) if event.text else b""
        if isinstance(event, ToolCallStart):
            index = self._tools[event.key] = len(self._tools)
            call: dict[str, Any] = {
                "index": index,
                "id": event.id,
                "type": "function",
                "function": {"name": event.name, "arguments": ""},
            }
            if self._signature is not None:
                call["extra_content"] = signed(self._signature)
                self._signature = None
            return self._delta({"tool_calls": [call]})
        if isinstance(event, ToolArgsDelta):
            out = b""
            if event.key not in self._tools:
                out = self.write(ToolCallStart(event.key, f"call_{event.key}", ""))
            call = {"index": self._tools[event.key], "function": {"arguments": event.text}}
            return out + self._delta({"tool_calls": [call]})
        if isinstance(event, Finished):
            self._stop = event.stop
            return b""
        if isinstance(event, UsageSeen):
            self._usage = event.usage
            return b""
        if isinstance(event, TierSeen):
            tiers.write_served(
                "chat", self.head, event.tier
            )  # on every chunk from here on, as OpenAI's chunks carry it
            return b""
        assert isinstance(event, Ended)
        return self.end()

    def end(self) -> bytes:
        if self.ended:
            return b""
        self.ended = True
        out = self._start() + self._chunk([{"index": 0, "delta": {}, "finish_reason": chat.FINISH_OF[self._stop]}])
        if self.include_usage and self._usage is not None:
            out += self._chunk([], usage=chat_reply.write_usage(self.said_usage(self._usage)))
        return out + DONE

    def error(self, message: str, status: int = 500, code: str | None = None) -> bytes:
        self.ended = True
        kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
        return (
            b"data: "
            + dump_json({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
            + b"\n\n"
        )
