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

    python -m benchmarks.soak                 # the recorded run (about three minutes)
    python -m benchmarks.soak --quick         # a smoke run
"""
