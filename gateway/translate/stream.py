"""A translated stream, relayed: the upstream's events in, the client API's events out.

``StreamTranslator`` has the forwarder's interface (``gateway.relay.forward.EventForwarder``): feed it
each upstream chunk and send what it returns. It splits the upstream's SSE into events, reads them in
the upstream's API (``stream_read``), and writes them in the client's (``stream_chat``,
``stream_messages``, ``stream_responses``): only whole events go out, each written once. An upstream
error event is held back, written in the client's shape, as the relay's ``error`` (so the relay may
still finish the answer elsewhere). A continuation after a mid-stream break (``continue_with``) reads
a new upstream into the same client stream: the same message, the same open block. The meter reads the
upstream's own bytes beside this, as it does for native streams. An upstream that reports no usage (some
OpenAI-compatible servers never do) leaves the client's API without one: the gateway's own count (``count``: the
prompt by the pinned tokenizer, the output as the meter counted it) is written in its place at the end, and the
Messages ``message_start`` (written before any count is made) says the request's size estimate. Created per client
stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.dialects import dialect_for
from gateway.errors import describe_error
from gateway.sse import SSESplitter, parse_event
from gateway.translate import client_stops, new_id
from gateway.translate.ir import Api, Ended, Event, Usage, UsageSeen
from gateway.translate.stream_chat import ChatWriter
from gateway.translate.stream_messages import MessagesWriter
from gateway.translate.stream_read import StreamReader, reader_for
from gateway.translate.stream_responses import ResponsesWriter

StreamWriter = ChatWriter | MessagesWriter | ResponsesWriter


UsageCount = Callable[[], Usage]
"""The gateway's own count of an answer's usage, asked only when its upstream reported none."""


def writer_for(client: Api, request: dict[str, Any], model: str, input_estimate: int = 0) -> StreamWriter:
    if client == "chat":
        options = request.get("stream_options")
        include = isinstance(options, dict) and options.get("include_usage") is True
        return ChatWriter(new_id("chat"), model, include_usage=include)
    if client == "messages":
        return MessagesWriter(new_id("messages"), model, input_estimate)
    return ResponsesWriter(new_id("responses"), model, request)


class StreamTranslator:
    """Feed upstream chunks, send what ``feed`` returns; ``error`` is a held-back error event (client's shape)."""

    def __init__(
        self,
        upstream: Api,
        client: Api,
        request: dict[str, Any],
        model: str = "",
        count: UsageCount | None = None,
        input_estimate: int = 0,
    ) -> None:
        self.upstream = upstream
        self.client = client
        self.writer = writer_for(client, request, model, input_estimate)
        self._count = count
        self._usage_seen = False
        self._dialect = dialect_for(upstream)
        self._stops = client_stops(client, request)
        self._reader: StreamReader = reader_for(upstream, self._stops)
        self._splitter = SSESplitter()
        self.error: bytes | None = None
        self.error_object: Any = None

    def feed(self, chunk: bytes) -> bytes:
        if self.error is not None:
            return b""
        return self._events(self._splitter.feed(chunk))

    def flush(self) -> bytes:
        """At the upstream's end: its last event if it lacked only the closing blank line."""
        if self.error is not None:
            return b""
        return self._events(self._splitter.flush())

    def _events(self, payloads: list[bytes]) -> bytes:
        out: list[bytes] = []
        for payload in payloads:
            events: list[Event]
            if payload == self._dialect.done_data:
                events = self._reader.done()
            else:
                event = parse_event(payload)
                if event is None:
                    continue  # not JSON: the meter counts it malformed; there is nothing to translate
                error = self._dialect.error_of(event)
                if error is not None:
                    message, code = describe_error(error)
                    self.error = self._error_event(message, code or "upstream_error")
                    self.error_object = error
                    break
                events = self._reader.read(event)
            for e in events:
                if isinstance(e, Ended):
                    out.append(self._counted())
                elif isinstance(e, UsageSeen):
                    self._usage_seen = True
                out.append(self.writer.write(e))
        return b"".join(out)

    def _counted(self) -> bytes:
        """Before the end: the gateway's count as the usage, if the upstream reported none (never in place of one)."""
        if self._usage_seen or self._count is None or self.writer.ended:
            return b""
        self._usage_seen = True
        return self.writer.write(UsageSeen(self._count()))

    def _error_event(self, message: str, code: str) -> bytes:
        """An error event in the client's API, held: the writer's state stays as if it had not been written."""
        writer = self.writer
        ended = writer.ended
        if isinstance(writer, ResponsesWriter):
            out = writer.error(message, code)
        elif isinstance(writer, ChatWriter):
            out = writer.error(message, 500, code)
        else:
            out = writer.error(message)
        writer.ended = ended  # only written if the relay decides to: it may still continue elsewhere
        if isinstance(writer, ResponsesWriter):
            writer.sequence -= 1
        return out

    # -- the relay's endings -----------------------------------------------------------------

    def clean_end(self) -> bytes:
        """The client stream's ending when the answer is complete but the upstream's ending never came."""
        return self._counted() + self.writer.end()

    def stream_error(self, message: str, code: str, last_sequence: int | None) -> bytes:
        """How the client's stream ends when the answer cannot be completed: an error event in its API's shape.

        Made before the relay knows whether another deployment will finish the answer instead: the writer's
        state is left as it was."""
        return self._error_event(message, code)

    @classmethod
    def continuing(
        cls,
        upstream: Api,
        client: Api,
        request: dict[str, Any],
        model: str,
        said_tokens: int,
        count: UsageCount | None = None,
    ) -> StreamTranslator:
        """A translator for a continuation of a stream the client got natively (its opening already sent)."""
        translator = cls(upstream, client, request, model, count)
        writer = translator.writer
        writer.started = True
        if isinstance(writer, MessagesWriter):
            writer.adopt_text_block(0)  # a continued native answer is one text block, the first (no thinking)
        writer.continue_stream(said_tokens)
        return translator

    def continue_with(self, upstream: Api, said_tokens: int, count: UsageCount | None = None) -> None:
        """A continuation of the broken answer follows, from ``upstream``: read it into the same client stream."""
        self.upstream = upstream
        self._count = count
        self._usage_seen = False
        self._dialect = dialect_for(upstream)
        self._reader = reader_for(upstream, self._stops)
        self._splitter = SSESplitter()
        self.error = None
        self.error_object = None
        self.writer.continue_stream(said_tokens)
