"""What judging an answer costs (``gateway.quality.judge``), beside what measuring it costs (``StreamMeter.finish``).

Both run once per answer, after its last byte went to the client. Run: ``python -m benchmarks.quality_cost``;
figures in ``benchmarks/quality_notes.md``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable

from gateway.dialects.base import ToolCall
from gateway.fakes.behavior import answer_words
from gateway.meter import StreamMeter
from gateway.quality import expectation_of, judge
from gateway.reading import Reading
from gateway.tokens import load_token_counter

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["q"]}}}]


def _per_call_us(fn: Callable[[], object], seconds: float = 0.5) -> float:
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


def _stream(tokens: int) -> bytes:
    chunks = [
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}).encode()
        for w in answer_words(0, tokens)
    ]
    chunks.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
    return b"\n\n".join(chunks) + b"\n\ndata: [DONE]\n\n"


def main() -> None:
    counter = load_token_counter("o200k_base")
    plain = expectation_of("chat", {"max_tokens": 2048})
    tools = expectation_of("chat", {"tools": TOOLS})
    json_mode = expectation_of("chat", {"response_format": {"type": "json_object"}})
    print(f"{'case':<40} {'judge µs':>9} {'finish µs':>10}")
    for tokens in (32, 256, 1024):
        raw = _stream(tokens)

        def finish(raw: bytes = raw) -> Reading:
            meter = StreamMeter(lambda: 0.0, 0.0)
            meter.feed(raw)
            return meter.finish(counter)

        reading = finish()
        judged = _per_call_us(functools.partial(judge, reading, plain))
        print(f"{f'plain answer, {tokens} tokens':<40} {judged:>9.1f} {_per_call_us(finish):>10.1f}")
    call = Reading(calls=(ToolCall("f", json.dumps({"q": "".join(answer_words(0, 64))})),), stop="tool")
    print(f"{'tool call, 64-token arguments':<40} {_per_call_us(lambda: judge(call, tools)):>9.1f}")
    obj = Reading(answer_text=json.dumps({"items": answer_words(0, 200)}), stop="stop")
    print(f"{'JSON answer, 200 items':<40} {_per_call_us(lambda: judge(obj, json_mode)):>9.1f}")


if __name__ == "__main__":
    main()
