"""What it costs the upstream client to know whether a request went out on a reused pooled connection.

    python -m benchmarks.connection_reuse

Three aiohttp sessions send the same small POST to a keep-alive server in another process, 3,000 requests a
run, in turn, five rounds: a plain ``TCPConnector``; a plain one with a ``TraceConfig`` whose
``on_connection_reuseconn`` marks a per-request cell (aiohttp's public way to say it); and the gateway's own
connector (``gateway.upstream_reuse``), which marks the connections it hands out. Client CPU per request (the server
runs in its own process) is the figure, best of the rounds; the ratio is to the plain connector's.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import types
from typing import Any

import aiohttp

from gateway.upstream_reuse import REUSED, ReuseMarkingConnector

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok"
REQUESTS = 3000
ROUNDS = 5


def serve(ports: Any) -> None:
    """A keep-alive HTTP server that answers every request with ``RESPONSE`` (run in a child process)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                writer.write(RESPONSE)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ports.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


async def _on_reuse(session: aiohttp.ClientSession, context: types.SimpleNamespace, params: object) -> None:
    context.trace_request_ctx.reused = True


async def run(kind: str, url: str) -> tuple[float, int]:
    """Client CPU µs per request, and how many requests went out on a reused connection."""
    if kind == "marking":
        session = aiohttp.ClientSession(connector=ReuseMarkingConnector())
    elif kind == "trace":
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_on_reuse)
        session = aiohttp.ClientSession(trace_configs=[trace])
    else:
        session = aiohttp.ClientSession()
    async with session:
        reused = 0
        started = 0.0
        for index in range(REQUESTS + 50):  # the first 50 warm up
            if index == 50:
                reused, started = 0, time.process_time()
            cell = types.SimpleNamespace(reused=False)
            REUSED.set(False)
            async with session.post(url, data=b"{}", trace_request_ctx=cell) as response:
                await response.read()
            reused += cell.reused if kind == "trace" else REUSED.get()
        return (time.process_time() - started) / REQUESTS * 1e6, reused


def main() -> None:
    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get()}/v1"
    best: dict[str, float] = {}
    try:
        for _ in range(ROUNDS):
            for kind in ("plain", "trace", "marking"):
                cpu, reused = asyncio.run(run(kind, url))
                best[kind] = min(best.get(kind, cpu), cpu)
                if kind != "plain":
                    assert reused == REQUESTS, (kind, reused)  # every request after the first reused one connection
    finally:
        server.terminate()
    for kind, cpu in best.items():
        print(f"{kind}: {cpu:.1f} µs client CPU per request ({cpu / best['plain']:.3f} x plain)")


if __name__ == "__main__":
    main()
