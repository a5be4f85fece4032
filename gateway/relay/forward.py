"""Which upstream bytes go to the client now: whole events only, never past an error event.

The relay forwards bytes as they come, but three things need the event boundaries:

- **Whole events.** An upstream may break in the middle of an event. Had its first half gone
  to the client, whatever follows (the gateway's error event, or a continuation's first
  chunk) would be glued to it and both would be garbled. So bytes after the last complete
  event are held until the event's blank line arrives. Providers flush per event, so this
  rarely holds anything, and a chunk that ends an event goes out untouched.
- **Error events.** An error event ends an upstream's part of the answer. It is held back, with
  whatever follows it, so that the relay can still choose between relaying it and continuing
  the answer elsewhere (``gateway.relay.recovery``).
- **A continuation's opening.** A stream that continues another repeats what opens a stream:
  the assistant role chunk and perhaps a reasoning preamble. Those are dropped until the first
  content, and the first content chunk loses its ``role``, so the client sees one answer.

Only a chunk that holds ``"error"`` or belongs to an opening is parsed; others cost a suffix
check. Created per upstream stream, not thread-safe.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.sse import SSESplitter, parse_event

_ERROR_KEY = b'"error"'
_DONE = b"[DONE]"
_SEPARATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")


class EventForwarder:
    """Feed each upstream chunk; send what ``feed`` returns. ``error`` is a held-back error event."""

    __slots__ = ("_tail", "_opening", "error", "error_object")

    def __init__(self, *, continuation: bool = False) -> None:
        self._tail = b""
        self._opening = continuation
        self.error: bytes | None = None
        """The raw error event that ended this stream (nothing after it is forwarded)."""
        self.error_object: Any = None
        """Its ``error`` member, to tell the request's faults from the provider's."""

    def feed(self, chunk: bytes) -> bytes:
        if self.error is not None:
            return b""
        data = self._tail + chunk if self._tail else chunk
        if self._opening or _ERROR_KEY in data:
            return self._sift(data)
        if data.endswith(b"\n\n"):
            self._tail = b""
            return data
        cut = _last_boundary(data)
        self._tail = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        """At a clean end of stream: the last event, if it lacked only its closing blank line, completed.

        An event cut short (its data not valid JSON) is dropped, as ``StreamMeter.end_of_stream`` drops it.
        """
        tail, self._tail = self._tail, b""
        if not tail.strip() or self.error is not None:
            return b""
        payloads = _flushed(tail)
        if not payloads or (payloads[0] != _DONE and parse_event(payloads[0]) is None):
            return b""
        return self._sift(tail.rstrip(b"\r\n") + b"\n\n")

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
            event = parse_event(payload) if payload != _DONE else None
            if event is not None and event.get("error") is not None:
                self.error = block
                self.error_object = event["error"]
                self._tail = b""
                break
            if self._opening:
                if payload != _DONE and event is not None and not _opens_answer(event):
                    continue  # the continuation's role chunk or reasoning: the client has had them
                self._opening = False
                block = _without_role(event, block)
            out.append(block)
        return b"".join(out)


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


def _opens_answer(event: dict[str, Any]) -> bool:
    """Whether this event is where the continuation's answer starts: content, a finish, or usage."""
    if event.get("usage"):
        return True
    choices = event.get("choices")
    if not isinstance(choices, list):
        return True  # not a chunk the gateway understands: let the client judge it
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") or choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
            return True
    return False


def _without_role(event: dict[str, Any] | None, block: bytes) -> bytes:
    """The event without its delta's ``role`` (the client had the role from the first stream)."""
    if event is None:
        return block
    changed = False
    for choice in event.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and "role" in delta:
            del delta["role"]
            changed = True
    if not changed:
        return block
    return b"data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
