"""A stream's reply against the former one (``tests/support/former_replies``): the same messages, the same outcomes.

``StreamReply`` lost a coroutine per stream's first and last send (``_last``), looks its upstream's redaction up once
per upstream stream, looks at a chunk's state once after its feeds, and answers the usual ending (its ``[DONE]``
relayed, no error, nothing incomplete) without calling ``_ending``. Whole streamed requests go through the app with
the dispatcher handing out either class: every message the client gets (start, headers, each body and its
``more_body``) and every attempt's outcome and reading (its clock readings aside) must be the same, however the
upstream cuts its stream, for a stream that ends well, one that ends without ``[DONE]``, without its finish, with an
error event, and one whose upstream breaks (with another deployment left to ask, or none).

And what issue 41 asks of the relay, pinned: every upstream read goes out in one ``send`` holding every event it
completes (several events already in the buffer: one send), nothing held back but an unfinished event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from typing import Any

import pytest

import gateway.relay.dispatch as dispatch
import gateway.relay.replies as replies
import tests.support.former_replies as former
from benchmarks import hotpath_memory
from benchmarks.hotpath_memory import MemoryResponse, openai_stream_chunks, running_app, stream_chunks
from gateway.config import GatewayConfig
from gateway.errors import UpstreamUnavailable
from gateway.reading import Reading
from gateway.runtime import runtime_of
from tests.test_chunk_path import cut_randomly
from tests.test_chunk_relay import IDS, body_for, relayed, untimed

REQUEST_ID = re.compile(rb"[0-9a-f]{32}")


class BreakingResponse(MemoryResponse):
    """Its chunks, then a dropped connection instead of the end of the body."""

    async def read_chunk(self) -> bytes:
        chunk = await super().read_chunk()
        if not chunk:
            raise UpstreamUnavailable("fake: connection dropped mid-answer", provider="fake")
        return chunk

    def read_ready(self) -> bytes | None:
        chunk = super().read_ready()
        if not chunk:
            raise UpstreamUnavailable("fake: connection dropped mid-answer", provider="fake")
        return chunk


ROUTED = (b"x-gateway-provider", b"x-gateway-deployment", b"x-gateway-route")
"""Which of two equal deployments answered, and why: the router's draw, not the reply's."""


def masked(message: dict[str, Any]) -> dict[str, Any]:
    """A message with what differs per request masked: the request id, the deployment the router drew, the
    translation's made-up ids."""
    out = dict(message)
    if "headers" in out:
        out["headers"] = [
            (name, b"-" if name in ROUTED else REQUEST_ID.sub(b"ID", value)) for name, value in out["headers"]
        ]
    if "body" in out:
        out["body"] = IDS.sub(b"", out["body"])
    return out


async def serve(
    reply_class: type, api: str, cuttings: list[list[bytes]], breaks: int, deployments: int
) -> list[tuple[Any, ...]]:
    """Each cutting's messages and recorded attempts, the dispatcher handing out ``reply_class``; the first
    ``breaks`` upstream streams of each request drop their connection after their chunks."""
    module: Any = dispatch  # where the dispatcher finds the class it hands out
    saved = module.StreamReply
    module.StreamReply = reply_class
    bench: Any = hotpath_memory
    configured = bench.bench_config

    def never_open(deployments: int) -> GatewayConfig:
        # Broken streams one after another would open the circuit at a time that depends on the machine's speed
        # (its cool-down is timed): a 503 in one run and not in the other. The circuit is not the reply's.
        config: GatewayConfig = configured(deployments)
        policies = {name: dataclasses.replace(p, failure_threshold=10**6) for name, p in config.policies.items()}
        return dataclasses.replace(config, policies=policies)

    bench.bench_config = never_open
    try:
        async with running_app(deployments) as app:
            runtime = runtime_of({"app": app})
            upstream: Any = next(iter(runtime.upstreams.clients.values()))
            recorded: list[tuple[str, Reading]] = []
            runner = runtime.dispatcher.runner
            original = runner.record

            def record(request: Any, attempt: Any, outcome: Any, reading: Reading, *args: Any, **kwargs: Any) -> Any:
                recorded.append((outcome, untimed(reading)))
                return original(request, attempt, outcome, reading, *args, **kwargs)

            runner.record = record  # type: ignore[method-assign]
            opened = [0]

            async def send(*args: Any, **kwargs: Any) -> MemoryResponse:
                opened[0] += 1
                kind = BreakingResponse if opened[0] <= breaks else MemoryResponse
                return kind(upstream.chunks, "text/event-stream")

            upstream.send = send
            path, body = body_for(api)
            seen = []
            for pieces in cuttings:
                upstream.chunks = pieces
                recorded.clear()
                opened[0] = 0
                messages = await relayed(app, path, body)
                seen.append(([masked(m) for m in messages], list(recorded)))
            return seen
    finally:
        module.StreamReply = saved
        bench.bench_config = configured


def streams() -> dict[str, list[bytes]]:
    bench = stream_chunks()
    words = bench[:12]  # the role, then words: no finish, no [DONE]
    error = b'data: {"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}\n\n'
    return {
        "bench": bench,
        "openai padded": openai_stream_chunks(),
        "no [DONE]": bench[:-1],
        "no finish": words,
        "an error event": [*words, error],
        # An error the forwarder does not hold (its key escaped: no ``"error"`` in the bytes) and the meter reads.
        "an error read, not held": [*words, error.replace(b'"error":{', b'"\\u0065rror":{'), bench[-1]],
        "an unfinished last event": [*bench[:-1], b"data: [DO"],
    }


def cuttings_of(stream: list[bytes], seed: str) -> list[list[bytes]]:
    rng = random.Random(seed)
    whole = b"".join(stream)
    # (A random cutting completes an unfinished last event: the stream as it is and whole keep it unfinished.)
    return [stream, [whole], *(cut_randomly(whole, rng) for _ in range(6))]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("name", list(streams()))
@pytest.mark.parametrize(
    ("breaks", "deployments"), [(0, 1), (1, 1), (1, 2)], ids=["whole", "broken", "broken, one left"]
)
def test_a_stream_reply_sends_and_records_what_the_former_one_did(
    api: str, name: str, breaks: int, deployments: int
) -> None:
    cuttings = cuttings_of(streams()[name], f"{api} {name}")
    before = asyncio.run(serve(former.StreamReply, api, cuttings, breaks, deployments))
    after = asyncio.run(serve(replies.StreamReply, api, cuttings, breaks, deployments))
    assert after == before
    assert all(messages[0]["status"] == 200 and recorded for messages, recorded in before)  # each one relayed
    messages, recorded = before[0]
    if breaks and name == "no finish":  # broken before its finish: the client's stream ends with an error event
        assert [outcome for outcome, _ in recorded] == ["broken_stream"]
        assert b"connection dropped mid-answer" in messages[-1]["body"] and messages[-1].get("more_body") is False


def expected_sends(reads: list[bytes]) -> list[bytes]:
    """What the relay sends for these upstream reads: the reads up to the one that completes the first word
    together (held for the first token), then one send per read holding every event it completes, nothing held
    back but an unfinished event; less the usage chunk the gateway asked for (the client did not)."""
    first_word = b'"content":" word0"'
    sends: list[bytes] = []
    pending = b""
    held = True
    for read in reads:
        pending += read
        end = pending.rfind(b"\n\n")
        cut = end + 2 if end >= 0 else 0
        if held and pending[:cut].find(first_word) < 0:
            continue
        held = False
        whole, pending = pending[:cut], pending[cut:]
        events = [event + b"\n\n" for event in whole.split(b"\n\n") if event and b'"choices":[]' not in event]
        if events:
            sends.append(b"".join(events))
    return sends


@pytest.mark.parametrize("seed", range(12))
def test_each_read_goes_out_in_one_send_with_every_event_it_completes(seed: int) -> None:
    rng = random.Random(seed)
    whole = b"".join(stream_chunks())
    reads = [stream_chunks(), [whole]][seed] if seed < 2 else cut_randomly(whole, rng)
    ((messages, recorded),) = asyncio.run(serve(replies.StreamReply, "chat", [reads], 0, 1))
    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert [m["body"] for m in bodies] == expected_sends(reads)
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert recorded[0][0] == "ok"
