"""What reading a stream costs per API: the meter, the forwarder and the final count, in-process.

Why: every relayed chunk passes the meter and the forwarder, and each API's events are read by its
own dialect (``gateway.dialects``). This times one 64-token answer, one event per token, as each
API streams it (chat with the usage chunk the gateway asks for and keeps from the client, the
Responses API's typed events, the Messages API's blocks): the byte path (``feed`` of the meter and
the forwarder, per chunk) and ``finish`` (parse and token count, once). Best of N runs, so the
machine's other load shows as little as possible.

    python -m benchmarks.dialects            # prints a table; --out FILE writes it as markdown
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gateway.dialects import dialect_for
from gateway.meter import StreamMeter
from gateway.relay.forward import EventForwarder
from gateway.samples import Endpoint
from gateway.tokens import load_token_counter

TOKENS = 64


def _data(payload: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


def chat_stream() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _data(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    usage = _data({"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": TOKENS}})
    return [chunk({"content": " word"}) for _ in range(TOKENS)] + [chunk({}, "stop") + usage + b"data: [DONE]\n\n"]


def responses_stream() -> list[bytes]:
    def delta(i: int) -> bytes:
        event = {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0}
        return _data({**event, "delta": " word", "sequence_number": i}, "response.output_text.delta")

    created = _data({"type": "response.created", "response": {"id": "r", "status": "in_progress"}}, "response.created")
    done = {
        "type": "response.completed",
        "response": {"id": "r", "status": "completed", "usage": {"input_tokens": 9, "output_tokens": TOKENS}},
    }
    return [created] + [delta(i) for i in range(TOKENS)] + [_data(done, "response.completed")]


def messages_stream() -> list[bytes]:
    def delta() -> bytes:
        payload = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " word"}}
        return _data(payload, "content_block_delta")

    start = _data({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 9}}}, "message_start")
    end = _data(
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": TOKENS}},
        "message_delta",
    )
    return [start] + [delta() for _ in range(TOKENS)] + [end + _data({"type": "message_stop"}, "message_stop")]


STREAMS: dict[Endpoint, Callable[[], list[bytes]]] = {
    "chat": chat_stream,
    "responses": responses_stream,
    "messages": messages_stream,
}


def measure(api: Endpoint, runs: int) -> tuple[float, float]:
    """Best-of-``runs`` microseconds: (byte path for the whole stream, finish)."""
    counter = load_token_counter("o200k_base")
    chunks = STREAMS[api]()
    dialect = dialect_for(api)
    best_feed = best_finish = float("inf")
    for _ in range(runs):
        meter = StreamMeter(time.perf_counter, time.perf_counter(), dialect)
        forwarder = EventForwarder(dialect, drop_usage_only=api == "chat")
        started = time.perf_counter()
        for chunk in chunks:
            meter.feed(chunk)
            forwarder.feed(chunk)
        fed = time.perf_counter()
        reading = meter.finish(counter)
        finished = time.perf_counter()
        assert reading.output_tokens == TOKENS and reading.finished, (api, reading)
        best_feed = min(best_feed, fed - started)
        best_finish = min(best_finish, finished - fed)
    return best_feed * 1e6, best_finish * 1e6


def _machine() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--out", help="write the table as markdown to this file")
    args = parser.parse_args()
    lines = [
        f"# Reading a stream, per API ({datetime.now(UTC):%Y-%m-%d}, {_machine()}, best of {args.runs})",
        "",
        f"One {TOKENS}-token answer, one event per token. Command: `python -m benchmarks.dialects`.",
        "",
        "| API | byte path (meter + forwarder), µs per stream | µs per chunk | finish (parse + count), µs |",
        "|---|---|---|---|",
    ]
    for api in STREAMS:
        feed, finish = measure(api, args.runs)
        chunks = len(STREAMS[api]())
        lines.append(f"| {api} | {feed:.0f} | {feed / chunks:.2f} | {finish:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)


if __name__ == "__main__":
    main()
