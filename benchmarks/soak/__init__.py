"""Soak: thousands of streamed requests through two gateway replicas on one Redis, while Redis is
restarted and the busiest provider is killed.

What it proves: a request that had a healthy alternative is never lost (every answer arrives
whole: the exact expected text, one ``[DONE]``, no error event), and a replica's memory stays
flat. Everything runs as separate processes on loopback: a ``redis-server`` of its own on a free
port, three fake providers and two replicas (``python -m gateway fake-provider`` / ``serve``),
and this process as the client (aiohttp on uvloop), which sends each request to the two replicas
in turn. Every deployment is marked ``continue_prefill``, so the streams the killed provider
was in the middle of are finished by another one (mid-stream recovery).

The run is bounded in requests and in time. Events fire on progress (share of requests done):
Redis is killed (SIGKILL) and started again, empty, on the same port a few seconds later; then
the provider with the most traffic is killed for good. Results go to
``benchmarks/results/soak.md``.

Memory: each replica runs under ``benchmarks.soak.heap`` (the plain ``gateway serve`` plus a signal
handler) and records its heap three times once the kill has settled (``load.HEAP_SHARES``). RSS keeps
the allocators' high-water mark, so an event that briefly holds more than before (the kill's broken
streams and their exception cycles, waiting for the collector) raises it once. The bound (1 MB per
100,000 requests) is judged on the RSS slope from the first record to the end, fitted against the
requests done. The live memory the records read (in use after a full collection) is reported beside it.

    python -m benchmarks.soak                 # the recorded run (about three minutes)
    python -m benchmarks.soak --quick         # a smoke run
"""
