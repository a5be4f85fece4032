"""Each API's stream events read into the neutral events (``gateway.translate.ir``), one upstream stream each.

A reader is fed the upstream's events one at a time (already parsed: the dialects and the SSE splitter
did that) and returns what they mean. Stateful (a chat tool call's first delta names it, later ones
only carry arguments), created per upstream stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.dialects.base import error_object, listed
from gateway.dialects.chat_events import content_text, content_thinking, finish_failure
from gateway.errors import describe_error
from gateway.translate import chat, chat_reply, messages, messages_reply, responses_reply, tiers
from gateway.translate.chat_assistant import reasoning_text, thought_signature
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
    TierSeen,
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
        self._live: int | None = None
        """The call whose events are given as they come; a later one's are held (``_held``) until the calls are over."""
        self._held: dict[int, list[Event]] = {}
        self._argued: set[int] = set()
        """The calls some of whose arguments came (a call with none has the empty object's, as a whole answer's)."""
        self._tier: str | None = None
        """The processing tier the chunks name (each chunk of OpenAI's does): told once, and again if it changes."""

    def read(self, event: dict[str, Any]) -> list[Event]:
        if "error" in event and not event.get("choices"):
            return [_failed(event["error"])]
        out: list[Event] = []
        tier = tiers.read_served("chat", event)
        if tier is not None and tier != self._tier:  # before the start: a Messages client is told it there
            self._tier = tier
            out.append(TierSeen(tier))
        if not self._started:
            self._started = True
            out.append(Started(str(event.get("id") or ""), str(event.get("model") or "")))
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        if choice is not None:
            delta = obj(choice.get("delta"))
            # Mistral's reasoning: a thinking part of the content.
            reasoning = reasoning_text(delta) or content_thinking(delta.get("content"))
            if reasoning:
                out += [*self._release(), ReasoningDelta(reasoning)]
            # OpenAI streams a refusal beside content.
            for text in (content_text(delta.get("content")), delta.get("refusal")):
                if isinstance(text, str) and text:
                    out += [*self._release(), TextDelta(text)]
            for call in listed(delta.get("tool_calls")):
                if isinstance(call, dict):
                    out.extend(self._call(call))
            finish = choice.get("finish_reason")
            failure = finish_failure(finish)
            if failure is not None:  # beside OpenRouter's error object, or (Mistral, DeepSeek) alone
                return [*out, _failed(event["error"] if event.get("error") is not None else failure, 502)]
            if isinstance(finish, str):
                out.extend(self._release())
                stop = chat.stop_of(finish, bool(self._calls))
                matched = chat.matched_stop(choice, self._stops) if stop == "end" else None
                out.append(Finished("stop_sequence", matched) if matched is not None else Finished(stop))
        usage = chat_reply.usage_in(event)
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
            self._argued.add(key)
            out.append(ToolArgsDelta(key, arguments))
        if self._live is None:
            self._live = key
        if key == self._live or not out:
            return out
        self._held.setdefault(key, []).extend(out)
        return []

    def _release(self) -> list[Event]:
        """The held calls, each whole, in the order they began, once the answer has moved past its calls.

        A chat stream may interleave its parallel calls' deltas (the next call begins, then the last one's arguments
        go on); the Messages and Responses APIs stream one call at a time, each finished before the next begins. So
        only the first call is given as it comes, and the others when no delta can follow: at the finish, the end,
        or the text after them. A call that got no arguments gets ``{}`` then: clients parse what they were given, and
        "" is no JSON."""
        out: list[Event] = []
        if self._live is not None and self._live not in self._argued:
            out.append(ToolArgsDelta(self._live, "{}"))
        for key, events in self._held.items():
            out += events if key in self._argued else [*events, ToolArgsDelta(key, "{}")]
        self._held.clear()
        self._live = None
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
        return [*self._release(), Ended()]


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
            tier = tiers.read_served("messages", message)
            started = Started(str(message.get("id") or ""), str(message.get("model") or ""))
            return [TierSeen(tier), started] if tier is not None else [started]
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
            tier = tiers.read_served("messages", event)
            if tier is not None:
                out.append(TierSeen(tier))
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
        if kind == "thinking":  # a block's start may hold its content, as a text block's may
            thought, signature = block.get("thinking"), block.get("signature")
            out: list[Event] = [ReasoningDelta(thought)] if isinstance(thought, str) and thought else []
            if isinstance(signature, str) and signature:
                out.append(ReasoningDelta("", signature=signature, maker="messages"))
            return out
        if kind == "redacted_thinking":
            return [ReasoningDelta("", encrypted=str(block.get("data") or ""), maker="messages")]
        return []

    def done(self) -> list[Event]:
        return []


def _index(event: dict[str, Any]) -> int:
    return count(event.get("index"))


class ResponsesReader:
    """A Responses stream's events; an item's ``.done`` events hold its whole text or arguments, of which the part its
    deltas did not give (all of it, from a server that streams a call's arguments whole) is given then."""

    def __init__(self) -> None:
        self._calls = False
        self._said: dict[tuple[int, str], str] = {}
        """Per output item and what streams in it (a content part's text, a call's ``arguments``): what deltas gave."""

    def read(self, event: dict[str, Any]) -> list[Event]:
        kind = event.get("type")
        key = count(event.get("output_index"))
        if kind == "response.created":
            response = obj(event.get("response"))
            started = Started(str(response.get("id") or ""), str(response.get("model") or ""))
            tier = tiers.read_served("responses", response)  # the tier asked, at the start; the one served at the end
            return [TierSeen(tier), started] if tier is not None else [started]
        if kind == "response.output_item.added":
            item = obj(event.get("item"))
            return self._call(key, item) if item.get("type") == "function_call" else []
        part = f"content {count(event.get('content_index'))}"
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return [TextDelta(self._say(key, part, str(event.get("delta") or "")))]
        if kind in ("response.output_text.done", "response.refusal.done"):
            rest = self._rest(key, part, event.get("text", event.get("refusal")))
            return [TextDelta(rest)] if rest else []
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return [ReasoningDelta(str(event.get("delta") or ""))]
        if kind == "response.function_call_arguments.delta":
            return [ToolArgsDelta(key, self._say(key, "arguments", str(event.get("delta") or "")))]
        if kind == "response.output_item.done":
            item = obj(event.get("item"))
            encrypted = item.get("encrypted_content")
            if item.get("type") == "reasoning" and isinstance(encrypted, str):
                return [ReasoningDelta("", encrypted=encrypted, maker="responses")]
            return self._call(key, item) if item.get("type") == "function_call" else []
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            response = obj(event.get("response"))
            if kind == "response.failed" or response.get("status") == "failed":
                return [_failed(response.get("error") or {"message": "the response failed"})]
            out: list[Event] = []
            usage = responses_reply.read_usage(response.get("usage"))
            if usage is not None:
                out.append(UsageSeen(usage))
            tier = tiers.read_served("responses", response)
            if tier is not None:
                out.append(TierSeen(tier))
            stop = responses_reply.stop_of(response.get("status"), response.get("incomplete_details"), self._calls)
            return [*out, Finished(stop), Ended()]
        if kind == "error":
            return [_failed(error_object(event))]
        return []

    def _call(self, key: int, item: dict[str, Any]) -> list[Event]:
        """A function call item, added or done: its start, once, and the arguments it holds beyond those streamed."""
        out: list[Event] = []
        if (key, "arguments") not in self._said:
            self._calls = True
            self._said[key, "arguments"] = ""
            out.append(ToolCallStart(key, str(item.get("call_id") or ""), str(item.get("name") or "")))
        rest = self._rest(key, "arguments", item.get("arguments"))
        return [*out, ToolArgsDelta(key, rest)] if rest else out

    def _say(self, key: int, kind: str, text: str) -> str:
        self._said[key, kind] = self._said.get((key, kind), "") + text
        return text

    def _rest(self, key: int, kind: str, whole: Any) -> str:
        """What ``whole`` holds beyond what the item's deltas gave ("" when they gave it all, or something else)."""
        said = self._said.get((key, kind), "")
        if not isinstance(whole, str) or not whole.startswith(said):
            return ""
        return self._say(key, kind, whole[len(said) :])

    def done(self) -> list[Event]:
        return []


def reader_for(api: Api, stops: Sequence[str] = ()) -> StreamReader:
    """A reader of ``api``'s stream; ``stops`` are the client's stop sequences (a chat choice may name the one met)."""
    if api == "chat":
        return ChatReader(stops)
    if api == "messages":
        return MessagesReader()
    return ResponsesReader()
