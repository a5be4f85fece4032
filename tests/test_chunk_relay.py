"""Whole streamed requests through the app, the upstream's stream cut every which way: the client gets the same bytes.

The relay loop reads each upstream chunk, meters it, forwards its whole events and sends them; after the answer's
finish it takes a read that is already in without a deadline (``UpstreamResponse.read_ready``). However the
upstream's bytes are cut (one event a read, several, an event split across reads, the whole stream in one read), the
client's stream (its bytes joined, the per-request ids masked) and the attempt's reading (all but its clock readings)
must come out the same, for a client of each API: chat as the upstream speaks it, Responses and Messages translated.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any

import msgspec
import pytest

from benchmarks.hotpath_memory import Driver, openai_stream_chunks, running_app, stream_chunks
from gateway.reading import Reading
from gateway.runtime import runtime_of
from tests.support.asgi import exchange
from tests.test_chunk_path import cut_randomly

IDS = re.compile(rb'"(id|item_id|created_at)":\s*("[a-z]+_[0-9a-f_]+"|[0-9]+)')
RETRY_IN = re.compile(rb"retry in [0-9.]+s")
"""An open circuit's error says how long is left of it: the clock's, not the relay's (it moves between two runs)."""
"""What the translation makes up per request (its message, response and item ids, the time)."""


def body_for(api: str) -> tuple[str, bytes]:
    messages = [{"role": "user", "content": "hi"}]
    if api == "chat":
        return "/v1/chat/completions", json.dumps({"model": "bench", "messages": messages, "stream": True}).encode()
    if api == "messages":
        body = {"model": "bench", "max_tokens": 64, "messages": messages, "stream": True}
        return "/v1/messages", json.dumps(body).encode()
    return "/v1/responses", json.dumps({"model": "bench", "input": "hi", "stream": True, "store": False}).encode()


async def relayed(app: Any, path: str, body: bytes) -> list[dict[str, Any]]:
    """One request's messages to the client."""
    scope = dict(Driver(app, True).scope)
    scope.update(path=path, raw_path=path.encode())
    return await exchange(app.proxies[path], scope, body)


def untimed(reading: Reading) -> Reading:
    """The reading without what the clock gives (the times, and how many gaps between reads there were)."""
    return msgspec.structs.replace(
        reading, ttft_s=None, first_answer_s=None, last_answer_s=None, tokens_per_s=None, chunk_gaps_s=()
    )


async def serve_cuttings(api: str, stream: list[bytes], cuttings: list[list[bytes]]) -> list[tuple[Any, ...]]:
    async with running_app(1) as app:
        runtime = runtime_of({"app": app})
        upstream = next(iter(runtime.upstreams.clients.values()))
        recorded: list[tuple[str, Reading]] = []
        original = runtime.dispatcher.runner.record

        def record(request: Any, attempt: Any, outcome: Any, reading: Reading, *args: Any, **kwargs: Any) -> Any:
            recorded.append((outcome, untimed(reading)))
            return original(request, attempt, outcome, reading, *args, **kwargs)

        runtime.dispatcher.runner.record = record  # type: ignore[method-assign]
        path, body = body_for(api)
        seen = []
        for pieces in cuttings:
            assert b"".join(pieces) == b"".join(stream)
            upstream.chunks = pieces  # type: ignore[attr-defined]
            recorded.clear()
            messages = await relayed(app, path, body)
            start = messages[0]
            sent = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
            ends = [m.get("more_body", False) for m in messages if m["type"] == "http.response.body"][-1]
            seen.append((start["status"], RETRY_IN.sub(b"retry in ?s", IDS.sub(b"", sent)), ends, list(recorded)))
        return seen


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("stream", [stream_chunks(), openai_stream_chunks()], ids=["bench", "openai padded"])
def test_a_stream_reaches_the_client_the_same_however_the_upstream_cuts_it(api: str, stream: list[bytes]) -> None:
    rng = random.Random(api)
    whole = b"".join(stream)
    cuttings = [stream, [whole], *(cut_randomly(whole, rng) for _ in range(20))]
    first, *others = asyncio.run(serve_cuttings(api, stream, cuttings))
    status, sent, ends, recorded = first
    assert status == 200 and ends is False and len(recorded) == 1 and recorded[0][0] == "ok"
    assert recorded[0][1].finished and recorded[0][1].output_tokens
    if api == "chat":  # the upstream's own events, less the usage chunk the gateway asked for and the client did not
        assert sent == IDS.sub(b"", b"".join(chunk for chunk in stream if b'"choices":[]' not in chunk))
    for other in others:
        assert other == first
