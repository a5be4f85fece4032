"""One paced stream with the fake's faults, whatever the API: a ``StreamScript`` says what each event is.

The faults mean the same in every API: ``drop_after`` cuts the connection after N answer chunks,
``stall_after`` goes silent, ``malformed_after`` sends an event that is not JSON, ``error_event_after``
sends the API's error event and ends, ``no_finish`` / ``no_done`` leave out the answer's finish and the
stream's ending, ``linger_s`` holds the stream open between them.
"""

from __future__ import annotations

import time
from typing import Protocol

from starlette.types import Send

from gateway.fakes.asgi import Disconnect, Drop, start_stream
from gateway.fakes.behavior import FakeBehavior, FakeHost, answer_words

MALFORMED = b"data: {not json\n\n"
UNPACED_YIELD_EVERY = 256
"""An unpaced stream never waits, and a send into a closed connection returns at once: every this many chunks it
yields to the loop, so that the watch on its client's hang-up runs and a long stream whose client left stops."""


class StreamScript(Protocol):
    """The events of one API's stream, in the order ``play`` asks for them."""

    def opening(self) -> bytes:
        """Sent at once with the headers, before the first-token wait (no output in it)."""
        ...

    def reasoning(self, word: str, index: int) -> bytes: ...

    def prelude(self) -> bytes:
        """Sent just before the first answer piece (an item's or a block's opening)."""
        ...

    def piece(self, text: str, first: bool) -> bytes: ...

    def finish(self) -> bytes:
        """What completes the answer (a finish_reason, a stop_reason, the item's closing)."""
        ...

    def end(self, ending: bool) -> bytes:
        """What follows the finish: usage, and (with ``ending``) the stream's last event."""
        ...

    def error_event(self) -> bytes: ...

    def fail_event(self) -> bytes: ...


async def play(
    host: FakeHost, send: Send, script: StreamScript, words: list[str], behavior: FakeBehavior, disconnect: Disconnect
) -> None:
    """Stream ``words`` through ``script`` at the behaviour's pace, with its faults."""
    state = host.state
    ttft = host.jittered(behavior.ttft_s, behavior.ttft_jitter)
    tps = host.jittered(behavior.tokens_per_s, behavior.tps_jitter)
    await start_stream(send)
    state.open_streams += 1
    state.max_open_streams = max(state.max_open_streams, state.open_streams)
    try:
        opening = script.opening()
        if opening:
            await send({"type": "http.response.body", "body": opening, "more_body": True})
        if await disconnect.sleep(ttft):
            state.cancelled += 1
            return
        started = time.perf_counter()
        for i in range(behavior.reasoning_tokens):
            reasoning = script.reasoning(answer_words(i, 1)[0], i)
            await send({"type": "http.response.body", "body": reasoning, "more_body": True})
        step = max(1, behavior.chunk_tokens)
        chunks = 0
        for start in range(0, len(words), step):
            if chunks == behavior.drop_after:
                raise Drop
            if chunks == behavior.stall_after and await disconnect.sleep(behavior.stall_s):
                state.cancelled += 1
                return
            if chunks == behavior.malformed_after:
                await send({"type": "http.response.body", "body": MALFORMED, "more_body": True})
            if chunks == behavior.error_event_after:
                await send({"type": "http.response.body", "body": script.error_event()})
                return
            if chunks == behavior.fail_event_after:
                await send({"type": "http.response.body", "body": script.fail_event()})
                return
            if tps > 0 and start > 0:
                due = started + start / tps
                if await disconnect.sleep(due - time.perf_counter()):
                    state.cancelled += 1
                    return
            elif chunks and chunks % UNPACED_YIELD_EVERY == 0 and await disconnect.sleep_briefly():
                state.cancelled += 1
                return
            text = "".join(words[start : start + step])
            body = (script.prelude() if start == 0 else b"") + script.piece(text, start == 0)
            await send({"type": "http.response.body", "body": body, "more_body": True})
            chunks += 1
        if chunks == behavior.drop_after:
            raise Drop
        tail = b""
        if not words:
            tail += script.prelude()
        if not behavior.no_finish:
            tail += script.finish()
        if behavior.linger_s > 0:
            await send({"type": "http.response.body", "body": tail, "more_body": True})
            tail = b""
            if await disconnect.sleep(behavior.linger_s):
                state.cancelled += 1
                return
        tail += script.end(not behavior.no_done)
        state.completed += 1
    finally:
        state.open_streams -= 1
    # Sent after the counts: a client that has read the stream's end finds it completed and
    # closed, with no window in which the counters lag.
    await send({"type": "http.response.body", "body": tail, "more_body": False})
