"""A whole (non-streamed) answer read from its bytes (``chat_body.tally_whole``, one ``Reading`` built at once) reads
what the body decoded into dicts read before: the former ``read_full_reply``, copied here, is the reference.

Random chat, completions and embeddings bodies (every field the read looks at, in each type a provider might send
it, and fields it never reads: ``logprobs``, ids, vectors; keys given twice; bodies that are no JSON object or
that msgspec refuses) are read both ways and must give equal ``Reading``s, exact token counts included. Whole
requests through the app (its real runtime, the provider answering from memory) relay the upstream's bytes as
they are, and record the same ``Sample`` with either read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import tomllib
from typing import Any

import pytest

from benchmarks.hotpath_memory import BENCH_CONFIG, Driver, MemoryUpstream, full_body, running_app
from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import CHAT, Dialect, dialect_for
from gateway.dialects.chat_body import tally_whole
from gateway.reading import Reading, read_full_reply, reading_of
from gateway.relay import runner as runner_module
from gateway.relay import verdict
from gateway.runtime import runtime_of
from gateway.samples import Sample
from gateway.sse import parse_event
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.samples import KeptSamples

COUNTER = load_token_counter("o200k_base")


def reference_read(body: bytes, counter: TokenCounter, dialect: Dialect = CHAT) -> Reading:
    """``read_full_reply`` as it was: the body decoded into dicts, ``tally_body``, ``reading_of``, then copied."""
    event = parse_event(body)
    if event is None:
        return Reading(malformed=True)
    tally = dialect.tally_body(event)
    reading = reading_of(tally, counter, 0.0, False)
    return Reading(
        output_tokens=reading.output_tokens,
        answer_text=reading.answer_text,
        usage_prompt_tokens=reading.usage_prompt_tokens,
        usage_completion_tokens=reading.usage_completion_tokens,
        usage_cached_tokens=reading.usage_cached_tokens,
        usage_cache_creation_tokens=reading.usage_cache_creation_tokens,
        finished=reading.finished,
        incomplete=reading.incomplete,
        error_message=reading.error_message,
        response_model=reading.response_model,
        response_id=reading.response_id,
        tool_calls=reading.tool_calls,
        provider_timings=reading.provider_timings,
        calls=reading.calls,
        stop=reading.stop,
    )


TEXTS = ["", " the quick brown fox", "héllo 世界 🦊", 'a "quoted" \\ line\nnext', "<|endoftext|>", "x" * 300]


def _any(rng: random.Random) -> Any:
    """A value of any JSON type (what a provider may put where a field of another type is expected)."""
    return rng.choice([None, True, False, 0, -3, 7, 2.5, "", "stop", [], [1, "a"], {}, {"k": 1}])


def _call(rng: random.Random, position: int) -> Any:
    if rng.random() < 0.1:
        return _any(rng)
    call: dict[str, Any] = {"id": f"call_{position}", "type": "function"}
    if rng.random() < 0.6:
        call["index"] = rng.choice([position, 0, 3, "1", None])
    function = rng.choice(
        [
            {"name": "lookup", "arguments": '{"q": "fox"}'},
            {"name": "other", "arguments": ""},
            {"arguments": "{}"},
            {"name": None, "arguments": 5},
            "not a function",
        ]
    )
    if rng.random() < 0.9:
        call["function"] = function
    return call


def _holder(rng: random.Random) -> dict[str, Any]:
    holder: dict[str, Any] = {}
    if rng.random() < 0.5:
        holder["role"] = "assistant"
    roll = rng.random()
    if roll < 0.7:
        holder["content"] = rng.choice(TEXTS)
    elif roll < 0.8:
        holder["content"] = None
    elif roll < 0.85:
        holder["content"] = [{"type": "text", "text": "parts"}]
    if rng.random() < 0.25:
        holder["tool_calls"] = rng.choice([None, [], [_call(rng, i) for i in range(rng.randint(1, 3))], _any(rng)])
    if rng.random() < 0.1:
        holder["function_call"] = rng.choice([{"name": "f", "arguments": '{"a": 1}'}, None, "x", {"name": "g"}])
    if rng.random() < 0.1:
        holder["refusal"] = None
    return holder


def _choice(rng: random.Random, index: int) -> Any:
    if rng.random() < 0.04:
        return _any(rng)
    choice: dict[str, Any] = {"index": rng.choice([index, index, "0", None])}
    roll = rng.random()
    if roll < 0.8:
        choice["message"] = _holder(rng)
    elif roll < 0.85:
        choice["message"] = _any(rng)
    elif roll < 0.95:
        choice["text"] = rng.choice([*TEXTS, None, 3])  # /v1/completions
    else:
        choice["delta"] = rng.choice([_holder(rng), {"content": "d"}, None, "x"])
    if rng.random() < 0.9:
        choice["finish_reason"] = rng.choice(
            ["stop", "length", "tool_calls", "function_call", "content_filter", "eos", "odd", "", None, 1]
        )
    if rng.random() < 0.2:
        choice["logprobs"] = {"content": [{"token": "the", "logprob": -0.1, "bytes": [116, 104, 101]}] * 20}
    return choice


def _usage(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return _any(rng)
    usage: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if rng.random() < 0.85:
            usage[key] = rng.choice([0, 5, 40, 1200, -1, True, "7", None, 2.0])
    roll = rng.random()
    if roll < 0.3:
        usage["prompt_tokens_details"] = rng.choice([{"cached_tokens": 3}, {"cached_tokens": None}, {}, None, "x"])
    elif roll < 0.4:
        usage["prompt_cache_hit_tokens"] = rng.choice([4, None, "4"])
    elif roll < 0.5:
        usage["cache_read_input_tokens"] = rng.choice([2, -2])
    return usage


def chat_body(rng: random.Random) -> dict[str, Any]:
    """A random chat (or completions, or embeddings) body: each field the whole read looks at, or not, of any type."""
    body: dict[str, Any] = {}
    fields: list[tuple[str, Any]] = [
        ("id", "chatcmpl-1"),
        ("object", rng.choice(["chat.completion", "text_completion", "list", "error", None, 3])),
        ("created", 1755137921),
        ("model", rng.choice(["gpt-4o-mini", "up-model", None, 7])),
        ("system_fingerprint", "fp_34a54111"),
        ("choices", rng.choice([[_choice(rng, i) for i in range(rng.choice([1, 1, 1, 2, 3]))], [], None, {}, "x"])),
        ("usage", _usage(rng)),
        ("error", rng.choice([{"message": "bad", "type": "x"}, "plain error", {"code": 500}, None])),
        ("message", "vLLM's message"),
        ("timings", rng.choice([{"predicted_ms": 12.5}, {}, None, [1]])),
        ("metrics", rng.choice([{"time_to_first_token": 0.1}, None])),
        ("perf_metrics", rng.choice([{"server_time": 3}, "x"])),
        ("x_groq", rng.choice([{"id": "g", "usage": {"queue_time": 0.1, "prompt_tokens": 3}}, {"usage": 5}, None])),
        ("data", [{"object": "embedding", "index": 0, "embedding": [rng.random() for _ in range(64)]}]),
    ]
    for key, value in fields:
        if rng.random() < (0.95 if key in ("choices", "model") else 0.3):
            body[key] = value
    keys = list(body)
    rng.shuffle(keys)
    return {key: body[key] for key in keys}


def variants(rng: random.Random, body: dict[str, Any]) -> list[bytes]:
    """The body's bytes as providers write them (compact, spaced), and cut or changed in ways JSON readers differ on."""
    compact = json.dumps(body, separators=(",", ":"), ensure_ascii=rng.random() < 0.5).encode()
    out = [compact, json.dumps(body, indent=rng.choice([None, 2])).encode()]
    if body:
        key = rng.choice(list(body))
        twice = json.dumps({key: _any(rng)})[1:-1].encode()
        out.append(b"{" + twice + b"," + compact[1:])  # the key twice, the last value wins
        out.append(compact[:-1] + b"," + twice + b"}")
    out.append(compact[: rng.randint(0, len(compact))])  # cut short
    out.append(compact.replace(b"0.1", b"NaN", 1))  # what msgspec refuses and ``json`` reads
    return out


ODD_BODIES = [
    b"",
    b"null",
    b"[]",
    b'"text"',
    b"<html>oops</html>",
    b'{"choices": [], "usage": {"prompt_tokens": true, "completion_tokens": "7"}}',
    b'{"object":"error","message":"This model\'s maximum context length is 4096 tokens.","type":"BadRequestError"}',
    b'{"error": {"message": "bad", "type": "x"}}',
    b'\xef\xbb\xbf{"choices": []}',
    b'{"choices": [{"message": {"content": "\\ud800 lone"}}]}',
    b'{"choices": [{"message": {"content": "big"}}], "usage": {"prompt_tokens": 1e400}}',
    b'{"choices": [{"delta": {"content": 5}}]}',
]


def read_or_raised(read: Any, raw: bytes, dialect: Dialect) -> Reading | type[BaseException]:
    """The reading, or the type of what was raised (a ``tool_calls`` that is a number fails both reads alike)."""
    try:
        reading: Reading = read(raw, COUNTER, dialect)
    except Exception as exc:
        return type(exc)
    return reading


@pytest.mark.parametrize("api", ["chat", "completions", "embeddings"])
def test_the_whole_read_gives_the_dict_reads_reading(api: str) -> None:
    dialect = dialect_for(api)  # type: ignore[arg-type]
    rng = random.Random(f"whole-{api}")
    taken = refused = 0
    bodies = [*ODD_BODIES, full_body()]
    for _ in range(1500):
        bodies += variants(rng, chat_body(rng))
    for raw in bodies:
        assert read_or_raised(read_full_reply, raw, dialect) == read_or_raised(reference_read, raw, dialect), raw
        try:
            typed = tally_whole(raw)
        except TypeError:
            continue
        if typed is None:
            refused += 1
        else:
            taken += 1
    # Both reads were exercised: most bodies by the typed read, the odd ones by the dict read.
    assert taken > 3000 and refused > 1000


def test_real_answers_are_read_typed() -> None:
    """The shapes providers send are taken by the typed read (not only handed to the dict read)."""
    openai = {
        "id": "chatcmpl-C4Hq",
        "object": "chat.completion",
        "created": 1755137921,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi there.", "refusal": None, "annotations": []},
                "logprobs": {"content": [{"token": "Hi", "logprob": -0.01, "bytes": [72, 105], "top_logprobs": []}]},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 3,
            "total_tokens": 23,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": "fp_34a54111",
    }
    tools = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9},
    }
    completions = {"object": "text_completion", "choices": [{"text": " fox", "index": 0, "finish_reason": "length"}]}
    embeddings = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1] * 1536}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    }
    for body in (openai, tools, completions, embeddings):
        raw = json.dumps(body).encode()
        assert tally_whole(raw) is not None
        assert read_full_reply(raw, COUNTER) == reference_read(raw, COUNTER)
    assert tally_whole(full_body()) is not None


def test_other_apis_are_read_as_before() -> None:
    messages = b'{"type":"message","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{}}'
    responses = b'{"object":"response","id":"resp_1","status":"completed","output":[],"usage":{"input_tokens":3}}'
    for api, raw in (("messages", messages), ("responses", responses)):
        dialect = dialect_for(api)  # type: ignore[arg-type]
        assert dialect.tally_whole(raw) is None
        assert read_full_reply(raw, COUNTER, dialect) == reference_read(raw, COUNTER, dialect)


async def _one(driver: Driver) -> bytes:
    """One request through the driver's endpoint: the body bytes its client received."""
    sent: list[bytes] = []
    asked = False
    done = asyncio.get_running_loop().create_future()

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": driver.body, "more_body": False}
        await done
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set_result(None)

    await driver.endpoint(dict(driver.scope), receive, send)
    return b"".join(sent)


async def _relay(bodies: list[bytes]) -> tuple[list[bytes], list[Sample]]:
    """Each body answered whole through the app: what the client received, and the samples recorded."""
    received: list[bytes] = []
    async with running_app(1) as app:
        runtime = runtime_of({"app": app})
        runner = runtime.dispatcher.runner
        recorded = KeptSamples(runner.sink)
        runner.sink = recorded
        upstream = runtime.upstreams.clients["fake"]
        driver = Driver(app, stream=False)
        for body in bodies:
            upstream.body = body  # type: ignore[attr-defined]
            received.append(await _one(driver))
    return received, recorded.samples


def _untimed(sample: Sample) -> Sample:
    return dataclasses.replace(sample, started_at=0.0, e2e_s=0.0, attempt_s=0.0)


def test_whole_requests_relay_the_same_bytes_and_record_the_same_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random("relay")
    bodies = [full_body()]
    while len(bodies) < 60:
        body = chat_body(rng)
        body.pop("error", None)  # an error body is relayed too, but as the provider's fault: another path
        if body.get("object") == "error":
            continue
        bodies.append(json.dumps(body).encode())
    received, samples = asyncio.run(_relay(bodies))
    monkeypatch.setattr(verdict, "read_full_reply", reference_read)
    received_before, samples_before = asyncio.run(_relay(bodies))
    assert received == bodies == received_before
    assert [_untimed(s) for s in samples] == [_untimed(s) for s in samples_before]
    assert len(samples) == len(bodies)
    assert any(s.outcome == "ok" and s.output_tokens for s in samples)


def test_an_answer_judged_before_it_is_sent_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``retry_invalid`` judges a whole answer before sending it; its sample is recorded from that same reading."""
    raw = tomllib.loads(BENCH_CONFIG.read_text())
    # Two deployments: a whole answer is judged before it is sent only while another is left to retry it on.
    raw["providers"] = [{**raw["providers"][0], "name": n, "base_url": "http://127.0.0.1:9/v1"} for n in ("a", "b")]
    raw["models"][0]["deployments"] = [{"provider": n, "model": "fake-model"} for n in ("a", "b")]
    raw["policies"] = {"judged": {"extends": "balanced", "retry_invalid": True}}
    raw["models"][0]["policy"] = "judged"
    config = parse_config(raw, source=str(BENCH_CONFIG))
    reads: list[bytes] = []
    real = verdict.read_whole

    def counted(request: Any, attempt: Any, counter: TokenCounter) -> Any:
        reads.append(attempt.body)
        return real(request, attempt, counter)

    monkeypatch.setattr(runner_module, "read_whole", counted)

    async def run() -> tuple[list[bytes], list[Sample]]:
        app = create_app(config)
        async with app.router.lifespan_context(app):
            runtime = runtime_of({"app": app})
            for name in ("a", "b"):
                await runtime.upstreams.clients[name].aclose()
                runtime.upstreams.clients[name] = MemoryUpstream()  # type: ignore[assignment]
            runner = runtime.dispatcher.runner
            recorded = KeptSamples(runner.sink)
            runner.sink = recorded
            driver = Driver(app, stream=False)
            return [await _one(driver) for _ in range(3)], recorded.samples

    received, samples = asyncio.run(run())
    assert received == [full_body()] * 3
    assert [s.validity for s in samples] == ["valid"] * 3
    assert reads == [full_body()] * 3
