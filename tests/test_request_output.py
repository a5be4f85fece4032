"""A whole request's output, pinned: what the client gets (status, headers in order, every body frame), the
access-log line and the attempt's ``Sample``, for chat requests through the app in process
(``benchmarks.hotpath_memory``: the real runtime, the provider answering from memory).

The request glue and the attempt set-up (``gateway/api.py``, ``relay/dispatch.py``, ``relay/runner.py``,
``relay/replies.py``, ``relay/outbound.py``) are rewritten for speed now and then; this holds them to the output
they had, field for field, with only what differs from run to run masked (the request id, clocks, durations).
The expected values were taken from the code before such a rewrite.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import pytest

from benchmarks.hotpath_memory import Driver, chat_body, full_body, running_app, stream_chunks
from gateway.runtime import runtime_of
from gateway.samples import Sample
from tests.support.asgi import exchange
from tests.support.samples import KeptSamples

ROUTE = "best-score"
"""The route of the model's one deployment: the plain choice (one deployment has nothing to explore or race)."""
TIMED_SAMPLE_FIELDS = ("started_at", "ttft_s", "first_answer_s", "tokens_per_s", "e2e_s", "attempt_s")
TIMED_LINE_FIELDS = ("ts", "ttft_s", "first_answer_s", "tokens_per_s", "duration_s", "overhead_s")


def _masked_sample(sample: Sample) -> dict[str, Any]:
    fields = dataclasses.asdict(sample)
    for name in TIMED_SAMPLE_FIELDS:
        fields[name] = fields[name] is not None
    fields["chunk_gaps_s"] = None if sample.chunk_gaps_s is None else len(sample.chunk_gaps_s)
    return fields


async def _served(body: dict[str, Any], extra_headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    async with running_app(1) as app:
        runtime = runtime_of({"app": app})
        recording = KeptSamples(runtime.dispatcher.runner.sink)
        runtime.dispatcher.runner.sink = recording
        driver = Driver(app, bool(body.get("stream")))
        raw = json.dumps(body).encode()
        messages = await exchange(driver.endpoint, driver.scope, raw, extra_headers)
        await asyncio.sleep(0)
        samples = recording.samples
    start, *frames = messages
    request_id = dict(start["headers"])[b"x-request-id"].decode()
    return {
        "start": {
            "type": start["type"],
            "status": start["status"],
            # The trace header's value holds timings: its name only.
            "headers": [
                (name, b"<trace>" if name == b"x-gateway-trace" else value.replace(request_id.encode(), b"<id>"))
                for name, value in start["headers"]
            ],
        },
        "frames": frames,
        "samples": [_masked_sample(sample) for sample in samples],
        "request_id_length": len(request_id),
    }


def _logged(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    (record,) = [r for r in caplog.records if r.name == "gateway.access"]
    line: dict[str, Any] = json.loads(record.getMessage())
    line["request_id"] = len(line["request_id"])
    for name in TIMED_LINE_FIELDS:
        if name in line:
            line[name] = line[name] is not None
    return line


def _chat(stream: bool, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(chat_body(stream))
    body.update(extra)
    return body


CASES = {
    "streamed": (_chat(True), []),
    "whole": (_chat(False), []),
    "streamed, usage asked": (_chat(True, stream_options={"include_usage": True}), []),
    "streamed, traced": (_chat(True), [(b"x-gateway-trace", b"1")]),
}


def _body(body: bytes, more: bool | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "http.response.body", "body": body}
    if more is not None:
        frame["more_body"] = more
    return frame


def _stream_frames(usage: bool) -> list[dict[str, Any]]:
    """The upstream's chunks as relayed: the role chunk held until the first word and sent with it, one frame per
    chunk after, the usage chunk only when the client asked for it, ``[DONE]`` ending the stream."""
    role, first, *words, finish, usage_chunk, done = stream_chunks()
    frames = [_body(role + first, True), *(_body(chunk, True) for chunk in [*words, finish])]
    if usage:
        frames.append(_body(usage_chunk, True))
    return [*frames, _body(done, False)]


SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
ANSWERED = [
    (b"x-gateway-attempts", b"1"),
    (b"x-gateway-route", ROUTE.encode()),
    (b"x-gateway-provider", b"fake"),
    (b"x-gateway-deployment", b"fake"),
    (b"x-request-id", b"<id>"),
]


def _sample(stream: bool, prompt_estimate: int) -> dict[str, Any]:
    return {
        "model": "bench",
        "deployment": "fake",
        "provider": "fake",
        "endpoint": "chat",
        "stream": stream,
        "outcome": "ok",
        "started_at": True,
        "status": 200,
        "ttft_s": stream,
        "first_answer_s": stream,
        "tokens_per_s": stream,
        "e2e_s": True,
        "output_tokens": 64,
        "usage_prompt_tokens": 20,
        "usage_completion_tokens": 32,
        "usage_cached_tokens": None,
        "prompt_tokens_estimate": prompt_estimate,
        "cost_usd": 0.0,
        "hedged": False,
        "attempt_s": True,
        "chunk_gaps_s": 31 if stream else 0,
        "kind": "plain",
        "validity": "valid",
    }


def _line(stream: bool) -> dict[str, Any]:
    return {
        "ts": True,
        "request_id": 32,
        "endpoint": "chat",
        "api": "chat",
        "upstream_api": "chat",
        "omitted_tools": None,
        "model": "bench",
        "stream": stream,
        "status": 200,
        "outcome": "ok",
        "validity": "valid",
        "provider": "fake",
        "deployment": "fake",
        "attempts": 1,
        "route": ROUTE,
        "ttft_s": stream,
        "first_answer_s": stream,
        "tokens_per_s": stream,
        "input_tokens": 20,
        "output_tokens": 64,
        "usage_source": "provider",
        "cost_usd": 0.0,
        "key": "anonymous",
        "team": None,
        "attempt_costs": [
            {"deployment": "fake", "provider": "fake", "outcome": "ok", "validity": "valid", "cost_usd": 0.0}
        ],
        "queue_wait_s": 0.0,
        "duration_s": True,
        "overhead_s": True,
    }


WHOLE = full_body()
EXPECTED: dict[str, dict[str, Any]] = {
    "streamed": {"headers": [*SSE, *ANSWERED], "frames": _stream_frames(usage=False), "prompt": 66},
    "whole": {
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(WHOLE)).encode()),
            *ANSWERED,
        ],
        "frames": [_body(WHOLE)],
        "prompt": 66,
    },
    "streamed, usage asked": {"headers": [*SSE, *ANSWERED], "frames": _stream_frames(usage=True), "prompt": 77},
    "streamed, traced": {
        "headers": [*SSE, *ANSWERED, (b"x-gateway-trace", b"<trace>")],
        "frames": _stream_frames(usage=False),
        "prompt": 66,
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_client_the_log_and_the_sample_get_what_they_got(case: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    body, headers = CASES[case]
    expected = EXPECTED[case]
    stream = bool(body["stream"])
    served = asyncio.run(_served(body, headers))
    assert served["start"] == {"type": "http.response.start", "status": 200, "headers": expected["headers"]}
    assert served["frames"] == expected["frames"]
    assert served["request_id_length"] == 32
    assert served["samples"] == [_sample(stream, expected["prompt"])]
    line = _logged(caplog)
    assert line == _line(stream)
    assert list(line) == list(_line(stream))  # the fields' order too
