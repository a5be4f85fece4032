"""The gateway's and the passthrough's apps driven in process, their provider answering from memory.

What ``benchmarks.hotpath_stages`` times: whole requests through the app ``create_app`` builds from
``gateway.bench.toml``, and through ``benchmarks.passthrough``'s app, with no sockets, uvicorn or fake
provider in the way, so that only each app's own work is measured. The upstream's answer is a 32-token
chat stream as the fake provider sends it (one event per chunk), or the same answer whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import random
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks import passthrough
from gateway.app import create_app
from gateway.config import GatewayConfig, parse_config
from gateway.runtime import runtime_of
from gateway.server import tune_garbage_collector

BENCH_CONFIG = Path(__file__).resolve().parent / "gateway.bench.toml"


def chat_body(stream: bool) -> bytes:
    return json.dumps(
        {
            "model": "bench",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant. " * 4},
                {"role": "user", "content": "Say something."},
            ],
            "stream": stream,
            "temperature": 0.7,
        }
    ).encode()


def stream_chunks() -> list[bytes]:
    """A 32-token chat stream as the fake provider sends it, one event per chunk."""
    head = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"fake-model","choices":['
    events = [head + '{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}']
    events += [head + f'{{"index":0,"delta":{{"content":" word{i}"}},"finish_reason":null}}]}}' for i in range(32)]
    events.append(head + '{"index":0,"delta":{},"finish_reason":"stop"}]}')
    events.append(head[: -len('"choices":[')] + '"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":32}}')
    return [f"data: {e}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


OBFUSCATION_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def openai_stream_chunks(seed: int = 1) -> list[bytes]:
    """The same 32 words as OpenAI streams them with ``stream_options.include_usage``: every chunk carries
    ``service_tier``, ``system_fingerprint``, ``logprobs``, ``"usage":null`` and an ``obfuscation`` string of
    its own (random letters and digits, 1 to 15 of them, as captured streams show), the usage chunk too."""
    rng = random.Random(seed)
    head = (
        '{"id":"chatcmpl-C4Hq5a6K3RaPMymUv70btQNYv6SvY","object":"chat.completion.chunk","created":1755137921,'
        '"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_34a54111",'
    )

    def padding() -> str:
        return "".join(rng.choice(OBFUSCATION_ALPHABET) for _ in range(rng.randint(1, 15)))

    def choice(delta: str, finish: str) -> str:
        return (
            f'"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}],'
            f'"usage":null,"obfuscation":"{padding()}"}}'
        )

    events = [head + choice('{"role":"assistant","content":"","refusal":null}', "null")]
    events += [head + choice(f'{{"content":" word{i}"}}', "null") for i in range(32)]
    events.append(head + choice("{}", '"stop"'))
    usage = (
        '{"prompt_tokens":20,"completion_tokens":32,"total_tokens":52,"prompt_tokens_details":{"cached_tokens":0,'
        '"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,'
        '"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}'
    )
    events.append(head + f'"choices":[],"usage":{usage},"obfuscation":"{padding()}"}}')
    return [f"data: {e}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def full_body() -> bytes:
    """The non-streamed answer of the same 32 words."""
    text = "".join(f" word{i}" for i in range(32))
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "fake-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 32, "total_tokens": 52},
        }
    ).encode()


class MemoryResponse:
    """An upstream response read from memory (``UpstreamResponse``'s interface)."""

    __slots__ = ("_chunks", "_at", "provider", "status", "headers")

    def __init__(self, chunks: list[bytes], content_type: str) -> None:
        self._chunks = chunks
        self._at = 0
        self.provider = "fake"
        self.status = 200
        self.headers = {"content-type": content_type}

    async def read_chunk(self) -> bytes:
        if self._at == len(self._chunks):
            return b""
        self._at += 1
        return self._chunks[self._at - 1]

    def read_ready(self) -> bytes | None:
        """``UpstreamResponse.read_ready``: everything is in memory, so never None."""
        if self._at == len(self._chunks):
            return b""
        self._at += 1
        return self._chunks[self._at - 1]

    async def read_all(self, limit: int | None = None) -> bytes:
        rest, self._at = self._chunks[self._at :], len(self._chunks)
        return b"".join(rest)

    def close(self) -> None:
        pass


class MemoryUpstream:
    """A provider's client answering every request from memory: the stream, or the whole body."""

    def __init__(self) -> None:
        self.chunks = stream_chunks()
        self.body = full_body()
        self.thought_signers: set[str] = set()
        self.refused_fields: set[str] = set()
        self.short_tool_ids = False

    async def send(self, path: str, body: bytes, timeouts: Any, headers: Any = (), api: str = "chat") -> MemoryResponse:
        if b'"stream":true' in body:
            return MemoryResponse(self.chunks, "text/event-stream")
        return MemoryResponse([self.body], "application/json")

    def redact(self, data: bytes) -> bytes:
        return data

    async def aclose(self) -> None:
        pass


def bench_config(deployments: int) -> GatewayConfig:
    raw = tomllib.loads(BENCH_CONFIG.read_text())
    raw["providers"][0]["base_url"] = "http://127.0.0.1:9/v1"
    if deployments > 1:
        raw["providers"] = [{**raw["providers"][0], "name": f"fake{i}"} for i in range(deployments)]
        raw["models"][0]["deployments"] = [{"provider": f"fake{i}", "model": "fake-model"} for i in range(deployments)]
    return parse_config(raw, source=str(BENCH_CONFIG))


class Driver:
    """Whole requests through the app's chat endpoint, client side in memory."""

    def __init__(self, app: Any, stream: bool) -> None:
        self.app = app
        proxies = getattr(app, "proxies", None)
        self.endpoint: Any = proxies["/v1/chat/completions"] if proxies is not None else app
        body = chat_body(stream)
        self.body = body
        self.scope: dict[str, Any] = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
            "app": app,
            "asgi": {"version": "3.0", "spec_version": "2.3"},  # what uvicorn's httptools protocol says
            "http_version": "1.1",
            "scheme": "http",
            "root_path": "",
            "raw_path": b"/v1/chat/completions",
        }
        self.sent_bytes = 0
        self.phases = [0.0, 0.0, 0.0]
        """CPU seconds, summed over requests: before the first body byte, then to the end of the client's
        response, then after it (the request's tail: what a next request arriving meanwhile waits for)."""

    async def one(self) -> None:
        done = asyncio.get_running_loop().create_future()
        body_read = False
        marks = [time.thread_time(), 0.0, 0.0]

        async def receive() -> dict[str, Any]:
            nonlocal body_read
            if not body_read:
                body_read = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            await done
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                if not marks[1]:
                    marks[1] = time.thread_time()
                self.sent_bytes += len(message.get("body", b""))
                if not message.get("more_body", False) and not done.done():
                    marks[2] = time.thread_time()
                    done.set_result(None)

        await self.endpoint(dict(self.scope), receive, send)
        await asyncio.sleep(0)  # the hang-up watch hears the end, as it would under uvicorn
        end = time.thread_time()
        self.phases[0] += marks[1] - marks[0]
        self.phases[1] += marks[2] - marks[1]
        self.phases[2] += end - marks[2]


class MemoryContent:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class MemoryAiohttpResponse:
    def __init__(self, chunks: list[bytes], content_type: str) -> None:
        self.status = 200
        self.headers = {"content-type": content_type}
        self.content = MemoryContent(chunks)

    def release(self) -> None:
        pass


class MemorySession:
    """aiohttp's ``ClientSession`` as the passthrough uses it, answering from memory."""

    def __init__(self, **_: Any) -> None:
        self.upstream = MemoryUpstream()

    async def post(self, url: str, data: bytes, headers: Any) -> MemoryAiohttpResponse:
        if b'"stream":true' in data:
            return MemoryAiohttpResponse(self.upstream.chunks, "text/event-stream")
        return MemoryAiohttpResponse([self.upstream.body], "application/json")

    async def close(self) -> None:
        pass


@contextlib.contextmanager
def served_collector() -> Iterator[None]:
    """The garbage collector as ``gateway serve`` runs it (its thresholds, start-up frozen) while an app is driven
    here, then CPython's own again: measured in process, a request should pay the collections it pays when served,
    not the default thresholds' young pass every 700 allocations, charged to whichever stage happened to allocate."""
    before = gc.get_threshold()
    tune_garbage_collector()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@contextlib.asynccontextmanager
async def running_passthrough(chunks: list[bytes] | None = None) -> AsyncIterator[Any]:
    """``benchmarks.passthrough``'s app, its aiohttp session answering from memory."""

    def session(**_: Any) -> MemorySession:
        made = MemorySession()
        if chunks is not None:
            made.upstream.chunks = chunks
        return made

    module: Any = passthrough  # its ``aiohttp`` swapped while the app starts (the lifespan opens the session)
    real = module.aiohttp
    module.aiohttp = SimpleNamespace(TCPConnector=lambda **_: None, ClientSession=session)
    try:
        app = passthrough.create_app("http://127.0.0.1:9/v1")
        async with app.router.lifespan_context(app):
            with served_collector():
                yield app
    finally:
        module.aiohttp = real


@contextlib.asynccontextmanager
async def running_app(deployments: int, redis_url: str | None = None) -> AsyncIterator[Any]:
    """The bench gateway in process, its upstreams answering from memory; its stats in Redis at ``redis_url``."""
    config = bench_config(deployments)
    if redis_url is not None:
        config = dataclasses.replace(
            config, stats=dataclasses.replace(config.stats, backend="redis", redis_url=redis_url)
        )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        runtime = runtime_of({"app": app})
        memory = MemoryUpstream()
        for name in list(runtime.upstreams.clients):
            await runtime.upstreams.clients[name].aclose()
            runtime.upstreams.clients[name] = memory  # type: ignore[assignment]
        with served_collector():
            yield app


async def driven_us(app: Any, stream: bool, requests: int, repeats: int, warm: int) -> float:
    """Best µs of process CPU per whole request ``Driver`` sends ``app``, over ``repeats`` runs of ``requests``
    (after ``warm`` unmeasured ones)."""
    driver = Driver(app, stream)
    for _ in range(warm):
        await driver.one()
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.process_time()
        for _ in range(requests):
            await driver.one()
        best = min(best, (time.process_time() - start) / requests)
    return best * 1e6


__all__ = [
    "BENCH_CONFIG",
    "Driver",
    "MemoryUpstream",
    "bench_config",
    "full_body",
    "running_app",
    "running_passthrough",
    "stream_chunks",
]
