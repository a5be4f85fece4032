"""Peak memory of metering one 200,000-token chat stream (one event a chunk), and its CPU per chunk.

    python -m benchmarks.meter_memory

Under tracemalloc (so slower than in a real run); run it in a worktree of another commit with the same
command to compare (``PYTHONPATH=<worktree>``).
"""

from __future__ import annotations

import time
import tracemalloc

from gateway.meter import StreamMeter
from gateway.tokens import load_token_counter

counter = load_token_counter("o200k_base")
piece = bytearray(
    b'data: {"id":"c","object":"chat.completion.chunk","model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}\n\n'
)
N = 200_000
tracemalloc.start()
t = [0.0]
meter = StreamMeter(lambda: t[0], 0.0)
started = time.process_time()
for _ in range(N):
    t[0] += 0.001
    meter.feed(bytes(piece))  # a new object per chunk, as a socket read gives
meter.feed(b"data: [DONE]\n\n")
fed = time.process_time() - started
_, peak_feed = tracemalloc.get_traced_memory()
reading = meter.finish(counter)
total = time.process_time() - started
_, peak = tracemalloc.get_traced_memory()
print(
    f"tokens {reading.output_tokens}; peak while feeding {peak_feed / 1e6:.1f} MB, with finish {peak / 1e6:.1f} MB; "
    f"feed {fed / N * 1e6:.2f} us/chunk, feed+finish {total / N * 1e6:.2f} us/chunk (under tracemalloc)"
)
