"""Each API's stream events read into the neutral events (``gateway.translate.ir``), one upstream stream each.

A reader is fed the upstream's events one at a time (already parsed: the dialects and the SSE splitter
did that) and returns what they mean. Stateful (a chat tool call's first delta names it, later ones
only carry arguments), created per upstream stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.dialects.base import listed
from gateway.errors import describe_error
from gateway.translate import chat, chat_reply, messages, messages_reply, responses_reply
from gateway.translate.chat_assistant import thought_signature
from gateway.translate.common import count, dump_json, obj
from gateway.translate.ir import (
    Api,
    Ended,
    Event,
    Failed,
    Finished,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolArgsDelta,
    ToolCallStart,
    Usage,
    UsageSeen,
)


class StreamReader(Protocol):
    def read(self, event: dict[str, Any]) -> list[Event]: ...

    def done(self) -> list[Event]:
        """The stream's ``[DONE]`` (chat); the other APIs end with an event of their own."""
        ...


def _failed(error: Any, status: int = 500) -> Failed:
    message, code = describe_error(error)
    return Failed(message, status, code)


class ChatReader:
    def __init__(self, stops: Sequence[str] = ()) -> None:
        self._stops = stops
        """The client's stop sequences: the one a choice says it matched ends the answer with it."""
        self._started = False
        self._calls: dict[int, str] = {}
        """Each tool call's key and id, in the order they began."""

    def read(self, event: dict[str, Any]) -> list[Event]:
        if "error" in event and not event.get("choices"):
            return [_failed(event["error"])]
        out: list[Event] = []
        if not self._started:
            self._started = True
            out.append(Started(str(event.get("id") or ""), str(event.get("model") or "")))
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        if choice is not None:
            delta = obj(choice.get("delta"))
            reasoning = delta.get("reasoning_content", delta.get("reasoning"))
            if isinstance(reasoning, str) and reasoning:
                out.append(ReasoningDelta(reasoning))
            for text in (delta.get("content"), delta.get("refusal")):  # OpenAI streams a refusal beside content
                if isinstance(text, str) and text:
                    out.append(TextDelta(text))
            for call in listed(delta.get("tool_calls")):
                if isinstance(call, dict):
                    out.extend(self._call(call))
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                stop = chat.stop_of(finish, bool(self._calls))
                matched = chat.matched_stop(choice, self._stops) if stop == "end" else None
                out.append(Finished("stop_sequence", matched) if matched is not None else Finished(stop))
        usage = chat_reply.read_usage(event.get("usage"))
        if usage is not None:
            out.append(UsageSeen(usage))
        return out

    def _call(self, call: dict[str, Any]) -> list[Event]:
        given = call.get("id")
        key = self._key(call.get("index"), given if isinstance(given, str) else "")
        function = obj(call.get("function"))
        out: list[Event] = []
        signature = thought_signature(call)
        if signature is not None:  # Gemini's, on the delta that carries the call: opaque reasoning before it
            out.append(ReasoningDelta("", encrypted=signature, maker="chat"))
        if key not in self._calls:
            call_id = given if isinstance(given, str) and given else f"call_{key}"
            self._calls[key] = call_id
            out.append(ToolCallStart(key, call_id, str(function.get("name") or "")))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out.append(ToolArgsDelta(key, arguments))
        return out

    def _key(self, index: Any, call_id: str) -> int:
        """The call a delta belongs to: its ``index``; without one (Gemini's OpenAI-compatible stream leaves it
        out), a delta with a new id begins the next call and any other goes on with the last call begun."""
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        last = next(reversed(self._calls), None)
        if last is None or (call_id and call_id != self._calls[last]):
            return max(self._calls, default=-1) + 1
        return last

    def done(self) -> list[Event]:
        return [Ended()]


class MessagesReader:
    def __init__(self) -> None:
        self._usage = Usage()
        self._tool_input: dict[int, Any] = {}
        """The open ``tool_use`` blocks that no ``input_json_delta`` has written yet: their start's ``input``."""

    def read(self, event: dict[str, Any]) -> list[Event]:
        kind = event.get("type")
        if kind == "message_start":
            message = obj(event.get("message"))
            self._usage = messages_reply.read_usage(message.get("usage")) or Usage()
            return [Started(str(message.get("id") or ""), str(message.get("model") or ""))]
        if kind == "content_block_start":
            return self._block(event)
        if kind == "content_block_delta":
            delta = obj(event.get("delta"))
            kind = delta.get("type")
            if kind == "text_delta":
                return [TextDelta(str(delta.get("text") or ""))]
            if kind == "thinking_delta":
                return [ReasoningDelta(str(delta.get("thinking") or ""))]
            if kind == "signature_delta":
                return [ReasoningDelta("", signature=str(delta.get("signature") or ""), maker="messages")]
            if kind == "input_json_delta":
                text = str(delta.get("partial_json") or "")
                if text:
                    self._tool_input.pop(_index(event), None)
                return [ToolArgsDelta(_index(event), text)]
            return []
        if kind == "content_block_stop" and _index(event) in self._tool_input:
            # A call without arguments streams none (one empty ``partial_json`` at most): the other APIs' clients
            # parse the arguments they were given, and "" is no JSON.
            return [ToolArgsDelta(_index(event), dump_json(self._tool_input.pop(_index(event)) or {}))]
        if kind == "message_delta":
            out: list[Event] = []
            seen = messages_reply.read_usage(event.get("usage"))
            if seen is not None:
                usage = event.get("usage") or {}
                self._usage.output_tokens = seen.output_tokens
                if "input_tokens" in usage:
                    self._usage.input_tokens = seen.input_tokens
                    self._usage.cached_tokens = seen.cached_tokens
                    self._usage.cache_creation_tokens = seen.cache_creation_tokens
            delta = obj(event.get("delta"))
            reason = delta.get("stop_reason")
            out.append(UsageSeen(self._usage))
            if isinstance(reason, str):
                sequence = delta.get("stop_sequence")
                out.append(Finished(messages.STOPS.get(reason, "end"), sequence if isinstance(sequence, str) else None))
            return out
        if kind == "message_stop":
            return [Ended()]
        if kind == "error":
            return [_failed(event.get("error", event))]
        return []

    def _block(self, event: dict[str, Any]) -> list[Event]:
        block = obj(event.get("content_block"))
        kind = block.get("type")
        if kind == "tool_use":
            self._tool_input[_index(event)] = block.get("input")
            return [ToolCallStart(_index(event), str(block.get("id") or ""), str(block.get("name") or ""))]
        if kind == "text" and block.get("text"):
            return [TextDelta(str(block["text"]))]
        if kind == "redacted_thinking":
            return [ReasoningDelta("", encrypted=str(block.get("data") or ""), maker="messages")]
        return []

    def done(self) -> list[Event]:
        return []


def _index(event: dict[str, Any]) -> int:
    return count(event.get("index"))


class ResponsesReader:
    def __init__(self) -> None:
        self._calls = False

    def read(self, event: dict[str, Any]) -> list[Event]:
        kind = event.get("type")
        if kind == "response.created":
            response = obj(event.get("response"))
            return [Started(str(response.get("id") or ""), str(response.get("model") or ""))]
        if kind == "response.output_item.added":
            item = obj(event.get("item"))
            if item.get("type") == "function_call":
                self._calls = True
                key = count(event.get("output_index"))
                return [ToolCallStart(key, str(item.get("call_id") or ""), str(item.get("name") or ""))]
            return []
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return [TextDelta(str(event.get("delta") or ""))]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return [ReasoningDelta(str(event.get("delta") or ""))]
        if kind == "response.function_call_arguments.delta":
            key = count(event.get("output_index"))
            return [ToolArgsDelta(key, str(event.get("delta") or ""))]
        if kind == "response.output_item.done":
            item = obj(event.get("item"))
            encrypted = item.get("encrypted_content")
            if item.get("type") == "reasoning" and isinstance(encrypted, str):
                return [ReasoningDelta("", encrypted=encrypted, maker="responses")]
            return []
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            response = obj(event.get("response"))
            if kind == "response.failed" or response.get("status") == "failed":
                return [_failed(response.get("error") or {"message": "the response failed"})]
            out: list[Event] = []
            usage = responses_reply.read_usage(response.get("usage"))
            if usage is not None:
                out.append(UsageSeen(usage))
            stop = responses_reply.stop_of(response.get("status"), response.get("incomplete_details"), self._calls)
            return [*out, Finished(stop), Ended()]
        if kind == "error":
            return [_failed(event.get("error") if isinstance(event.get("error"), dict) else event)]
        return []

    def done(self) -> list[Event]:
        return []


def reader_for(api: Api, stops: Sequence[str] = ()) -> StreamReader:
    """A reader of ``api``'s stream; ``stops`` are the client's stop sequences (a chat choice may name the one met)."""
    if api == "chat":
        return ChatReader(stops)
    if api == "messages":
        return MessagesReader()
    return ResponsesReader()
