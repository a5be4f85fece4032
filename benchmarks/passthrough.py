"""The floor: a bare passthrough on the gateway's own stack, and nothing else.

Starlette + uvicorn (uvloop, httptools) with an aiohttp upstream client: ``POST
/v1/chat/completions`` is forwarded to the upstream and the response bytes are streamed back
as they come. No routing, metering, stats, metrics, logging or limits. Whatever the gateway
costs above this is the price of its features; what this costs above going direct is the price
of the stack (issue 5 measured ~0.3 ms CPU per streamed 32-token request for it).

    python -m benchmarks.passthrough --port 8090 --upstream http://127.0.0.1:9001/v1
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


def create_app(upstream: str) -> Starlette:
    """The passthrough app; ``upstream`` is the provider's base URL up to and including ``/v1``."""
    sessions: list[aiohttp.ClientSession] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # No pool cap: the benchmark decides the concurrency, the floor must not queue.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        sessions.append(session)
        try:
            yield
        finally:
            await session.close()

    async def chat(request: Request) -> Response:
        body = await request.body()
        headers = {"content-type": "application/json"}
        upstream_response = await sessions[0].post(upstream + "/chat/completions", data=body, headers=headers)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream_response.content.iter_any():
                    yield chunk
            finally:
                upstream_response.release()

        media_type = upstream_response.headers.get("content-type", "application/json")
        return StreamingResponse(relay(), status_code=upstream_response.status, media_type=media_type)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/healthz", healthz)]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--upstream", required=True, help="the provider's base URL, e.g. http://127.0.0.1:9001/v1")
    args = parser.parse_args()
    app = create_app(args.upstream.rstrip("/"))
    uvicorn.run(
        app, host=args.host, port=args.port, loop="uvloop", http="httptools", access_log=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
