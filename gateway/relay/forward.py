"""Which upstream bytes go to the client now: whole events only, never past an error event.

The relay forwards bytes as they come, but three things need the event boundaries:

- **Whole events.** An upstream may break in the middle of an event. Had its first half gone
  to the client, whatever follows (the gateway's error event, or a continuation's first
  chunk) would be glued to it and both would be garbled. So bytes after the last complete
  event are held until the event's blank line arrives. Providers flush per event, so this
  rarely holds anything, and a chunk that ends an event goes out untouched.
- **Error events.** An error event ends an upstream's part of the answer. It is held back, with
  whatever follows it, so that the relay can still choose between relaying it and continuing
  the answer elsewhere (``gateway.relay.recovery``). One whose message the client's SDK could not
  read (not an object with a ``message``) is relayed reworded in the client API's error shape.
- **A continuation's opening.** A stream that continues another repeats what opens a stream:
  the assistant role chunk and perhaps a reasoning preamble. Those are dropped until the first
  content, and the first content chunk loses its ``role``, so the client sees one answer
  (chat and completions; for the Messages API, ``message_start``, ``ping`` and the text block's
  opening; the Responses API is never continued).
- **A usage chunk the client did not ask for.** When the gateway asked a chat or completions
  stream for its usage (``stream_options.include_usage``, for cost) and the client had not, the
  empty-``choices`` chunk that carries it is not forwarded: a client that did not ask may index
  ``choices[0]`` and choke on it. A usage field on a chunk with choices is left as it is.

- **The model's name, on the Messages API.** ``message_start`` names the model that answers; the gateway
  shows the name the client asked for there (``shown_model``), not the deployment's own id: Claude Code drops
  the thinking blocks of an answer from another model than the one it asked for, and Anthropic then refuses the
  next turn of a tool call made while thinking. Only the stream's first event is parsed for it.

- **A continuation's usage.** The continuation's provider counts the prefill (the answer so far)
  as prompt and only its own part as output; the client bills on ``usage``, which must cover the
  whole answer. So a continuation's usage moves ``said_tokens`` (the earlier parts' output, counted
  in the pinned encoding) from its prompt to its output: chat's ``prompt_tokens`` /
  ``completion_tokens``, the Messages API's ``input_tokens`` / ``output_tokens``; totals stay.

What an error event is comes from the stream's ``Dialect``. Only a chunk that holds ``"error"``
or belongs to an opening is split and parsed event by event; others cost a suffix check. A chunk
holding an empty ``choices`` list, when usage is dropped, has only the events around each ``[]``
parsed, and only a usage chunk cut out: the rest goes on as it came. Created per upstream
stream, not thread-safe.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from gateway.dialects import CHAT, Dialect, scans
from gateway.dialects.base import listed
from gateway.dialects.chat import usage_only
from gateway.errors import describe_error
from gateway.sse import SSESplitter, goes_on, parse_event

_find: Final = scans.find
"""``scans.find``, held where compiled code reads it directly (mypyc keeps a ``Final`` in a C static: no look-up by
name on each chunk)."""

# ``Final``, as ``_find``: ``feed`` reads ``_ERROR_KEY`` on every chunk, and a plain module name is a look-up by name
# on each read in the compiled module.
_ERROR_KEY: Final = b'"error"'
_USAGE_KEY: Final = b'"usage"'
_EMPTY_CHOICES: Final = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_SEPARATORS: Final = (b"\n\n", b"\r\n\r\n", b"\r\r")


class EventForwarder:
    """Feed each upstream chunk; send what ``feed`` returns. ``error`` is a held-back error event."""

    __slots__ = ("_tail", "_more", "_opening", "_dialect", "_drop_usage", "_said", "_model", "error", "error_object")

    def __init__(
        self,
        dialect: Dialect = CHAT,
        continuation: bool = False,
        drop_usage_only: bool = False,
        said_tokens: int = 0,
        shown_model: str | None = None,
    ) -> None:
        """Each argument may be given by position: the relay makes one forwarder per stream, and the compiled class
        parses keyword arguments at several times the cost of positional ones."""
        self._tail = b""
        self._more: list[bytes] = []
        """Chunks that went on the unfinished event of ``_tail`` with no blank line: joined once it ends, not
        copied onto it per chunk (``SSESplitter._more``; the meter, fed first, bounds the event's size)."""
        self._opening = continuation
        self._dialect = dialect
        self._drop_usage = drop_usage_only
        self._said = said_tokens
        self._model = shown_model
        """The model name ``message_start`` (the stream's first event) is to show; None once that has passed."""
        self.error: bytes | None = None
        """The raw error event that ended this stream (nothing after it is forwarded)."""
        self.error_object: Any = None
        """Its ``error`` member, to tell the request's faults from the provider's."""

    def feed(self, chunk: bytes) -> bytes:
        if self.error is not None:
            return b""
        tail = self._tail
        if tail:
            more = self._more
            if not chunk.endswith(b"\n\n") and goes_on(more[-1] if more else tail, chunk):
                more.append(chunk)  # the event goes on: nothing of it can go out yet
                return b""
            data = b"".join((tail, *more, chunk)) if more else tail + chunk
            more.clear()
        else:
            data = chunk
        # ``_find``, not ``in`` nor a ``find`` method (``gateway.dialects.scans``): these scans run on every chunk.
        if (
            self._opening
            or self._model is not None
            or _find(data, _ERROR_KEY) >= 0
            or (self._said and _find(data, _USAGE_KEY) >= 0)
        ):
            return self._sift(data)
        if self._drop_usage and _find(data, b"[]") >= 0 and _EMPTY_CHOICES.search(data):
            return self._sift(data) if b"\r" in data else self._without_usage(data)
        if data.endswith(b"\n\n"):
            if tail:
                self._tail = b""
            return data
        cut = _last_boundary(data)
        self._tail = data[cut:]
        return data[:cut]

    def clean_end(self) -> bytes:
        """What ends the client's stream when the answer is complete but the provider's ending never came."""
        return self._dialect.clean_end

    def stream_error(self, message: str, code: str, last_sequence: int | None) -> bytes:
        """An error event in the client API's shape: how a stream that cannot be completed ends."""
        return self._dialect.stream_error(message, code, last_sequence)

    def _reworded(self, error: object) -> bytes:
        """A provider's error event that the client's SDK cannot read, as the same message in the client API's own
        error shape."""
        message, code = describe_error(error)
        return self._dialect.stream_error(message, code or "upstream_error", None)

    def flush(self) -> bytes:
        """At a clean end of stream: the last event, if it lacked only its closing blank line, completed.

        An event cut short (its data not valid JSON) is dropped, as ``StreamMeter.end_of_stream`` drops it.
        """
        tail, self._tail = b"".join((self._tail, *self._more)), b""
        self._more.clear()
        if not tail.strip() or self.error is not None:
            return b""
        payloads = _flushed(tail)
        if not payloads or (payloads[0] != self._dialect.done_data and parse_event(payloads[0]) is None):
            return b""
        return self._sift(tail.rstrip(b"\r\n") + b"\n\n")

    def _without_usage(self, data: bytes) -> bytes:
        """The complete events of ``data`` (``\n`` line endings) less its usage chunks; other bytes as they came.

        Only an event holding ``[]`` can be one: each is found around its ``[]``, parsed and, when
        ``usage_only``, cut out; what ``_sift`` would parse and drop, and nothing else. (Should one of
        them be an error event after all, ``_sift`` takes the whole of ``data``.)
        """
        end = data.rfind(b"\n\n")
        cut = 0 if end < 0 else end + 2
        self._tail = data[cut:]
        out: list[bytes] = []
        kept = 0
        at = data.find(b"[]", 0, cut)
        while at >= 0:
            start = data.rfind(b"\n\n", kept, at)
            start = kept if start < 0 else start + 2
            end = data.find(b"\n\n", at) + 2
            payloads = SSESplitter().feed(data[start:end])
            payload = payloads[0] if payloads else b""
            event = parse_event(payload) if b"[]" in payload and payload != self._dialect.done_data else None
            if event is not None and self._dialect.error_of(event) is not None:
                return self._sift(data)
            if event is not None and usage_only(event):
                out.append(data[kept:start])
                kept = end
            at = data.find(b"[]", end, cut)
        if not kept:
            return data[:cut]
        out.append(data[kept:cut])
        return b"".join(out)

    def _sift(self, data: bytes) -> bytes:
        """The slow path: event by event, for an opening to drop or an error event to hold."""
        cut = _last_boundary(data)
        self._tail = data[cut:]
        out: list[bytes] = []
        splitter = SSESplitter()
        for block, payload in _events(data[:cut], splitter):
            if payload is None:
                out.append(block)  # a comment or keep-alive
                continue
            done = payload == self._dialect.done_data
            # Only what could be an error, a dropped usage chunk or an opening is parsed.
            said = self._said and _USAGE_KEY in payload
            started = self._model is not None  # the stream's first event: message_start, if anything
            wanted = (
                self._opening or _ERROR_KEY in payload or (self._drop_usage and b"[]" in payload) or said or started
            )
            event = parse_event(payload) if wanted and not done else None
            error = self._dialect.error_of(event) if event is not None else None
            if error is not None:
                self.error = block if _readable(error) else self._reworded(error)
                self.error_object = error
                self._tail = b""
                break
            if self._drop_usage and event is not None and usage_only(event):
                continue  # the usage chunk the gateway asked for: the meter has read it
            if self._opening:
                if not done and event is not None and not self._dialect.opens_answer(event):
                    continue  # the continuation's opening (role chunk, reasoning, message_start): the client has it
                self._opening = False
                block = _without_role(event, block)
            if said and event is not None:
                block = _whole_usage(event, block, self._said)
            if started:
                if event is not None and event.get("type") == "message_start":
                    block = _named(event, block, self._model or "")
                self._model = None
            out.append(block)
        return b"".join(out)


def _readable(error: object) -> bool:
    """Whether the client's SDK can read the message of a provider's error event (as the dialect's ``error_of`` gives
    it): an object with a string ``message``. TGI's is a bare string (``{"error": "...", "error_type": ...}``), of
    which the ``openai`` SDK shows only "An error occurred during streaming"."""
    return isinstance(error, dict) and isinstance(error.get("message"), str)


def _flushed(tail: bytes) -> list[bytes]:
    splitter = SSESplitter()
    splitter.feed(tail)
    return splitter.flush()


def _last_boundary(data: bytes) -> int:
    """The offset just after the last complete event (0 if there is none)."""
    ends = [(data.rfind(separator), len(separator)) for separator in _SEPARATORS]
    return max((at + size for at, size in ends if at >= 0), default=0)


def _events(data: bytes, splitter: SSESplitter) -> list[tuple[bytes, bytes | None]]:
    """Each complete event of ``data`` as (its bytes, its data payload or None), line endings normalised."""
    text = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events = []
    for block in text.split(b"\n\n")[:-1]:
        if not block:
            continue
        payloads = splitter.feed(block + b"\n\n")
        events.append((block + b"\n\n", payloads[0] if payloads else None))
    return events


def _whole_usage(event: dict[str, Any], block: bytes, said: int) -> bytes:
    """The event with its ``usage`` covering the whole answer: ``said`` tokens moved from prompt to output."""
    usage = event.get("usage")
    if not isinstance(usage, dict):
        inner = event.get("message") if isinstance(event.get("message"), dict) else None
        usage = inner.get("usage") if inner is not None else None
    if not isinstance(usage, dict):
        return block
    changed = False
    for prompt_key, output_key in (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens")):
        output = usage.get(output_key)
        if isinstance(output, int) and not isinstance(output, bool):
            usage[output_key] = output + said
            prompt = usage.get(prompt_key)
            if isinstance(prompt, int) and not isinstance(prompt, bool):
                usage[prompt_key] = max(0, prompt - said)
            changed = True
    if not changed:
        return block
    return _rewritten(event, block)


def _rewritten(event: dict[str, Any], block: bytes) -> bytes:
    """``block`` with ``event`` as its data, its other lines kept (the Messages API's ``event: message_delta``)."""
    data = b"data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()
    kept = [line for line in block.split(b"\n") if line and not line.startswith(b"data:")]
    return b"\n".join([*kept, data]) + b"\n\n"


def _named(event: dict[str, Any], block: bytes, model: str) -> bytes:
    """``message_start`` showing ``model`` as the model that answers (the event as it came if it already does)."""
    message = event.get("message")
    if not isinstance(message, dict) or message.get("model") == model:
        return block
    message["model"] = model
    return _rewritten(event, block)


def _without_role(event: dict[str, Any] | None, block: bytes) -> bytes:
    """The event without its delta's ``role`` (the client had the role from the first stream)."""
    if event is None:
        return block
    changed = False
    for choice in listed(event.get("choices")):
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and "role" in delta:
            del delta["role"]
            changed = True
    if not changed:
        return block
    return b"data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
