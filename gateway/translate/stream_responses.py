"""The neutral stream events written as the Responses API streams them, for a client that speaks it.

``response.created`` and ``response.in_progress``, then one output item at a time: a reasoning item
(``response.reasoning_text.delta``), a message (``output_item.added``, ``content_part.added``,
``output_text.delta`` ..., ``output_text.done``, ``content_part.done``, ``output_item.done``) or a
function call (``function_call_arguments.delta`` ..., ``.done``; a custom tool's call: its whole input in one
``custom_tool_call_input.delta``, then ``.done``; a client tool search's call: its item only), then
``response.completed`` (or ``response.incomplete`` with its reason) holding every item and the usage. Every event
carries ``sequence_number``, from 0 without a gap. Created per client stream, not thread-safe.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.translate import freeform, responses_reply, sealed, tiers, tool_search
from gateway.translate.common import dump_json
from gateway.translate.ir import (
    Api,
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
    ToolArgsDelta,
    ToolCallStart,
    Usage,
    UsageSeen,
)
from gateway.translate.namespaces import split
from gateway.translate.stream_write import WriterState


class _Item:
    def __init__(self, kind: str, item_id: str, index: int) -> None:
        self.kind = kind
        self.id = item_id
        self.index = index
        self.text = ""
        self.call_id = ""
        self.name = ""
        self.encrypted: str | None = None
        self.maker: Api | None = None
        """Who made ``encrypted`` (``Reasoning.maker``)."""
        self.signature = ""


class ResponsesWriter(WriterState):
    def __init__(self, response_id: str, model: str, request: dict[str, Any]) -> None:
        super().__init__()
        self.response_id = response_id
        self.model = model
        self.request = request
        self.created = int(time.time())
        self.sequence = -1
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._tools: dict[int, _Item] = {}
        self._stop: StopReason = "end"
        self._usage: Usage | None = None
        self._tier: str | None = None
        self._custom = freeform.custom_names(request)
        """The client's custom tools: their calls stream their ``input`` whole, once it is known."""
        self._search = tool_search.NAME if tool_search.offered(request) else None
        """The client's own tool search: its calls' arguments are an object, given whole in the item when it ends."""

    @property
    def last_sequence(self) -> int | None:
        return self.sequence if self.sequence >= 0 else None

    def _event(self, data: dict[str, Any]) -> bytes:
        self.sequence += 1
        payload = {
            "type": data["type"],
            "sequence_number": self.sequence,
            **{k: v for k, v in data.items() if k != "type"},
        }
        return f"event: {data['type']}\ndata: {dump_json(payload)}\n\n".encode()

    def _response(self, status: str) -> dict[str, Any]:
        output = [self._finished(item) for item in self._items] if status != "in_progress" else []
        usage = self._usage if status != "in_progress" else None
        response = responses_reply.response_object(
            self.request, self.response_id, self.model, self.created, status, output, usage, self._stop
        )
        tiers.write_served("responses", response, self._tier)
        return response

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        out = self._event({"type": "response.created", "response": self._response("in_progress")})
        return out + self._event({"type": "response.in_progress", "response": self._response("in_progress")})

    def write(self, event: Event) -> bytes:
        if isinstance(event, Failed):
            return self.error(event.message, event.code)
        if isinstance(event, Started):
            if event.model and not self.started:
                self.model = event.model
            return self._start()
        if isinstance(event, Finished):
            self._stop = event.stop
            return b""
        if isinstance(event, UsageSeen):
            self._usage = event.usage
            return b""
        if isinstance(event, TierSeen):
            self._tier = event.tier
            return b""
        if isinstance(event, Ended):
            return self.end()
        out = self._start()
        if isinstance(event, TextDelta):
            if not event.text:
                return out
            out += self._ensure("message")
            item = self._current()
            item.text += event.text
            data = {
                "item_id": item.id,
                "output_index": item.index,
                "content_index": 0,
                "delta": event.text,
                "logprobs": [],
            }
            return out + self._event({"type": "response.output_text.delta", **data})
        if isinstance(event, ReasoningDelta):
            if event.encrypted is not None:
                if event.maker != "responses" and not sealed.wanted(self.request):
                    return out  # another maker's: only a client that asked can send it back
                out += self._reasoning_item()
                item = self._current()
                item.encrypted, item.maker = event.encrypted, event.maker
                return out
            if event.signature:  # a Messages thinking block's, sealed for the client (``gateway.translate.sealed``)
                out += self._reasoning_item()
                self._current().signature = event.signature
                return out
            if not event.text:
                return out
            out += self._reasoning_item()
            item = self._current()
            item.text += event.text
            data = {"item_id": item.id, "output_index": item.index, "content_index": 0, "delta": event.text}
            return out + self._event({"type": "response.reasoning_text.delta", **data})
        if isinstance(event, ToolCallStart):
            out += self._open_item("function_call", event.id, event.name)
            self._tools[event.key] = self._current()
            return out
        assert isinstance(event, ToolArgsDelta)
        call = self._tools.get(event.key)
        if call is None:
            out += self.write(ToolCallStart(event.key, f"call_{event.key}", ""))
            call = self._tools[event.key]
        call.text += event.text
        if call.name in self._custom or call.name == self._search:
            return out  # JSON arguments; the input they hold is sent when the call ends (``_close``)
        data = {"item_id": call.id, "output_index": call.index, "delta": event.text}
        return out + self._event({"type": "response.function_call_arguments.delta", **data})

    def _reasoning_item(self) -> bytes:
        """The open reasoning item, or a new one where the open one is done: one opaque value (a signature, encrypted
        reasoning) per item, so that each goes back whole (the next thinking block is signed apart)."""
        item = self._open
        if item is not None and item.kind == "reasoning" and (item.signature or item.encrypted is not None):
            return self._open_item("reasoning")
        return self._ensure("reasoning")

    def _current(self) -> _Item:
        assert self._open is not None
        return self._open

    def _ensure(self, kind: str) -> bytes:
        if self._open is not None and self._open.kind == kind:
            return b""
        return self._open_item(kind)

    def _open_item(self, kind: str, call_id: str = "", name: str = "") -> bytes:
        out = self._close()
        prefix = {"message": "msg", "function_call": "fc", "reasoning": "rs"}[kind]
        suffix = self.response_id.removeprefix("resp_")
        item = _Item(kind, f"{prefix}_{suffix}_{len(self._items)}", len(self._items))
        item.call_id, item.name = call_id, name
        self._items.append(item)
        self._open = item
        added: dict[str, Any]
        if kind == "message":
            added = {"id": item.id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        elif kind == "reasoning":
            added = {"id": item.id, "type": "reasoning", "summary": []}
        else:
            added = responses_reply.function_call(item.id, "in_progress", call_id, name, "", self.request)
        out += self._event({"type": "response.output_item.added", "output_index": item.index, "item": added})
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            data = {"item_id": item.id, "output_index": item.index, "content_index": 0, "part": part}
            out += self._event({"type": "response.content_part.added", **data})
        return out

    def _finished(self, item: _Item) -> dict[str, Any]:
        if item.kind == "message":
            content = [{"type": "output_text", "text": item.text, "annotations": [], "logprobs": []}]
            # Only the message open when the answer ends can be cut: ``_stop`` is known by then, "end" before.
            status = "incomplete" if self._stop in ("length", "filter") else "completed"
            return {"id": item.id, "type": "message", "status": status, "role": "assistant", "content": content}
        if item.kind == "reasoning":
            done: dict[str, Any] = {"id": item.id, "type": "reasoning", "summary": []}
            if item.text:
                done["content"] = [{"type": "reasoning_text", "text": item.text}]
            opaque: str | None = None
            if item.encrypted is not None:
                opaque = sealed.held(Reasoning("", encrypted=item.encrypted, maker=item.maker), "responses")
            elif item.signature and sealed.wanted(self.request):
                opaque = sealed.seal(Reasoning(item.text, signature=item.signature, maker="messages"))
            if opaque is not None:
                done["encrypted_content"] = opaque
            return done
        return responses_reply.function_call(item.id, "completed", item.call_id, item.name, item.text, self.request)

    def _close(self) -> bytes:
        item = self._open
        if item is None:
            return b""
        self._open = None
        out = b""
        where = {"item_id": item.id, "output_index": item.index}
        if item.kind == "message":
            out += self._event(
                {"type": "response.output_text.done", **where, "content_index": 0, "text": item.text, "logprobs": []}
            )
            part = {"type": "output_text", "text": item.text, "annotations": [], "logprobs": []}
            out += self._event({"type": "response.content_part.done", **where, "content_index": 0, "part": part})
        elif item.kind == "reasoning" and item.text:
            out += self._event({"type": "response.reasoning_text.done", **where, "content_index": 0, "text": item.text})
        elif item.kind == "function_call" and item.name == self._search:
            pass  # a ``tool_search_call`` has no argument events: its item, done, holds them
        elif item.kind == "function_call" and item.name in self._custom:
            text = freeform.input_of(item.text)
            out += self._event({"type": "response.custom_tool_call_input.delta", **where, "delta": text})
            out += self._event({"type": "response.custom_tool_call_input.done", **where, "input": text})
        elif item.kind == "function_call":
            name = split(item.name, self.request)[0]
            done = {"type": "response.function_call_arguments.done", **where, "name": name, "arguments": item.text}
            out += self._event(done)
        return out + self._event(
            {"type": "response.output_item.done", "output_index": item.index, "item": self._finished(item)}
        )

    def end(self) -> bytes:
        if self.ended:
            return b""
        out = self._start() + self._close()
        self.ended = True
        status = "incomplete" if self._stop in ("length", "filter") else "completed"
        return out + self._event({"type": f"response.{status}", "response": self._response(status)})

    def error(self, message: str, code: str | None = None) -> bytes:
        self.ended = True
        return self._event({"type": "error", "code": code or "upstream_error", "message": message, "param": None})
