"""A fake OpenAI-compatible provider: chat, completions, embeddings and models, streamed or not,
with configurable speed and faults.

Why it exists: the gateway's tests, demo and benchmarks need upstreams whose behaviour is
known exactly (first-token time, tokens per second, answer length) and that misbehave on
demand (error statuses, hangs, stalls, dropped connections, malformed chunks, no ``[DONE]``),
over real HTTP. It is a plain ASGI app, so that it is fast enough to be the "direct" baseline
of the overhead benchmark.

Behaviour is a ``FakeBehavior`` set per server and overridable per request, in the request
body's ``fake`` object (which the gateway relays untouched), e.g.::

    {"model": "m", "messages": [...], "fake": {"ttft_s": 0.2, "servers": {"slow": {"status": 503}}}}

Fields at the top of ``fake`` apply to every server; those under ``servers.<name>`` only to the
server of that name. ``POST /_fake/behavior`` changes a running server's behaviour and
``GET /_fake/state`` reports its counters.

The answer is made of words that are one token each in both ``o200k_base`` and
``cl100k_base``, so ``output_tokens`` is exactly what the gateway's meter should count.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import random
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive, Scope, Send

WORDS = (
    "the quick brown fox jumps over lazy dog and then runs far away into forest where it finds "
    "small river with clear water under bright sun while birds sing songs of joy"
).split()


def answer_words(start: int, count: int) -> list[str]:
    """Answer tokens ``start .. start+count``: " word" pieces, one token each."""
    return [" " + WORDS[i % len(WORDS)] for i in range(start, start + count)]


@dataclass(frozen=True, slots=True)
class FakeBehavior:
    """How a fake provider answers. Times in seconds; ``-1`` means "never" for the *_after fields."""

    ttft_s: float = 0.0
    """Delay before the first output chunk (the role chunk is sent at once with the headers)."""
    ttft_jitter: float = 0.0
    """Log-normal sigma applied to ``ttft_s`` per request (0: fixed)."""
    tokens_per_s: float = 0.0
    """Pace of the answer after its first token; 0 streams as fast as possible."""
    tps_jitter: float = 0.0
    """Log-normal sigma applied to ``tokens_per_s`` per request (0: fixed)."""
    output_tokens: int = 32
    """Answer length, cut to the request's ``max_tokens`` / ``max_completion_tokens``."""
    chunk_tokens: int = 1
    reasoning_tokens: int = 0
    """Reasoning tokens streamed (``delta.reasoning_content``) before the answer."""
    tool_call: bool = False
    """Answer with a streamed tool call (the same words, as its arguments) instead of content."""
    status: int = 200
    """An error status to answer with (subject to ``fail_first`` and ``error_rate``)."""
    error_code: str | None = None
    """The ``error.code`` of an error answer or error event, e.g. ``context_length_exceeded``."""
    retry_after: str | None = None
    fail_first: int = 0
    """Only the first N requests to this server fail with ``status`` (0: every request)."""
    error_rate: float = 1.0
    """Share of requests that fail with ``status`` (seeded)."""
    hang_s: float = 0.0
    """Wait this long before sending any headers."""
    stall_after: int = -1
    """After this many answer chunks, stop sending (for ``stall_s``) without closing."""
    stall_s: float = 3600.0
    drop_after: int = -1
    """After this many answer chunks, drop the connection mid-stream."""
    malformed_after: int = -1
    """After this many answer chunks, send a chunk that is not JSON."""
    error_event_after: int = -1
    """After this many answer chunks, send an error event and end the stream."""
    no_done: bool = False
    """End the stream without ``data: [DONE]``."""
    no_finish: bool = False
    """Send no ``finish_reason`` (with ``no_done``: an answer that just stops)."""
    linger_s: float = 0.0
    """After the finish chunk, keep the stream open this long before the rest (usage, ``[DONE]``)."""
    reject_prefill: bool = False
    """Answer 400 to a request that continues a prefill, as a provider that cannot continue one does."""
    model: str | None = None
    """The model id to report; by default the one the request named."""
    embedding_dim: int = 8
    seed: int | None = None

    def merged(self, overrides: dict[str, Any]) -> FakeBehavior:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown fake behaviour fields: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **overrides)


@dataclass(slots=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass(slots=True)
class FakeState:
    requests: int = 0
    open_streams: int = 0
    max_open_streams: int = 0
    completed: int = 0
    cancelled: int = 0
    last_request_at: float | None = None
    """``time.monotonic()`` when the last inference request arrived."""
    recorded: list[RecordedRequest] = field(default_factory=list)


class _Disconnect:
    """Watches ``receive`` for the client hanging up, so a paced stream stops at once."""

    def __init__(self, receive: Receive) -> None:
        self.event = asyncio.Event()
        self.task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.event.set()
                return

    async def sleep(self, seconds: float) -> bool:
        """Sleep, or return True early if the client went away."""
        if seconds <= 0:
            return self.event.is_set()
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.task.cancel()


class _Drop(Exception):
    """Raised inside the app after the response started: uvicorn then closes the connection."""


class FakeProvider:
    """The ASGI app. ``name`` tells the server apart in per-request overrides.

    ``record=True`` keeps every request (path, headers, body) in ``state.recorded`` for tests.
    ``api_key`` set: requests without ``Authorization: Bearer <api_key>`` get a 401.
    """

    def __init__(
        self,
        name: str = "fake",
        behavior: FakeBehavior | None = None,
        *,
        api_key: str | None = None,
        record: bool = False,
        models: tuple[str, ...] = ("fake-model",),
    ) -> None:
        self.name = name
        self.behavior = behavior or FakeBehavior()
        self.api_key = api_key
        self.record = record
        self.models = models
        self.state = FakeState()
        self._rng = random.Random(self.behavior.seed)

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/_fake/state" and method == "GET":
            await _send_json(send, 200, self.snapshot())
            return
        if path == "/_fake/behavior" and method == "POST":
            body = await _read_body(receive)
            try:
                self.behavior = self.behavior.merged(json.loads(body or b"{}"))
            except (ValueError, TypeError) as exc:
                await _send_error(send, 400, str(exc), "invalid_request_error")
                return
            await _send_json(send, 200, dataclasses.asdict(self.behavior))
            return
        if path.endswith("/models") and method == "GET":
            await self._models(send)
            return
        if method != "POST" or not path.endswith(("/chat/completions", "/completions", "/embeddings")):
            await _send_error(send, 404, f"no route {method} {path}", "invalid_request_error")
            return
        await self._inference(scope, receive, send, path)

    def snapshot(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requests": self.state.requests,
            "open_streams": self.state.open_streams,
            "max_open_streams": self.state.max_open_streams,
            "completed": self.state.completed,
            "cancelled": self.state.cancelled,
        }

    async def _models(self, send: Send) -> None:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": self.name} for m in self.models]
        await _send_json(send, 200, {"object": "list", "data": data})

    async def _inference(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        self.state.requests += 1
        self.state.last_request_at = time.monotonic()
        number = self.state.requests
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        raw = await _read_body(receive)
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError:
            await _send_error(send, 400, "invalid JSON body", "invalid_request_error")
            return
        if self.record:
            self.state.recorded.append(RecordedRequest(path=path, headers=headers, body=body))
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            await _send_error(send, 401, "invalid api key", "invalid_request_error", code="invalid_api_key")
            return
        try:
            behavior = self._behavior_for(body, headers)
        except (ValueError, TypeError) as exc:
            await _send_error(send, 400, f"fake: {exc}", "invalid_request_error")
            return

        if behavior.reject_prefill and _prefill_words(body, path):
            message = f"fake {self.name}: an assistant prefill cannot be continued here"
            await _send_error(send, 400, message, "invalid_request_error", "prefill_unsupported")
            return
        disconnect = _Disconnect(receive)
        try:
            if behavior.hang_s > 0 and await disconnect.sleep(behavior.hang_s):
                self.state.cancelled += 1
                return
            if self._fails(behavior, number):
                extra = [(b"retry-after", behavior.retry_after.encode())] if behavior.retry_after else []
                kind = "rate_limit_error" if behavior.status == 429 else "invalid_request_error"
                if behavior.status >= 500:
                    kind = "server_error"
                message = f"fake {self.name}: error {behavior.status}"
                await _send_error(send, behavior.status, message, kind, behavior.error_code, extra)
                return
            model = behavior.model or str(body.get("model", "fake-model"))
            if path.endswith("/embeddings"):
                await self._embeddings(send, body, behavior, model)
            elif body.get("stream") is True:
                await self._stream(send, body, behavior, model, path, disconnect)
            else:
                await self._complete(send, body, behavior, model, path, disconnect)
        finally:
            disconnect.close()

    def _behavior_for(self, body: dict[str, Any], headers: dict[str, str]) -> FakeBehavior:
        behavior = self.behavior
        overrides: dict[str, Any] = {}
        header = headers.get("x-fake-behavior")
        if header:
            overrides.update(json.loads(header))
        fake = body.get("fake")
        if isinstance(fake, dict):
            overrides.update({k: v for k, v in fake.items() if k != "servers"})
            servers = fake.get("servers")
            if isinstance(servers, dict) and isinstance(servers.get(self.name), dict):
                overrides.update(servers[self.name])
        return behavior.merged(overrides) if overrides else behavior

    def _fails(self, behavior: FakeBehavior, number: int) -> bool:
        if behavior.status == 200:
            return False
        if behavior.fail_first and number > behavior.fail_first:
            return False
        return behavior.error_rate >= 1.0 or self._rng.random() < behavior.error_rate

    def _jittered(self, value: float, sigma: float) -> float:
        return value * self._rng.lognormvariate(0.0, sigma) if sigma > 0 and value > 0 else value

    @staticmethod
    def _answer_plan(body: dict[str, Any], behavior: FakeBehavior, path: str) -> tuple[int, int, str]:
        """Where the answer starts (words given as a prefill), how many words follow, and why it ends.

        The whole answer is ``output_tokens`` words; a prefill that already holds its first words
        is continued after them, and ``max_tokens`` bounds only the words generated now, as a
        real model's does.
        """
        skip = _prefill_words(body, path)
        remaining = max(0, behavior.output_tokens - skip)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < remaining:
            return skip, limit, "length"
        return skip, remaining, "stop"

    async def _complete(
        self, send: Send, body: dict[str, Any], behavior: FakeBehavior, model: str, path: str, disconnect: _Disconnect
    ) -> None:
        skip, length, finish = self._answer_plan(body, behavior, path)
        text = "".join(answer_words(skip, length))
        tps = self._jittered(behavior.tokens_per_s, behavior.tps_jitter)
        delay = self._jittered(behavior.ttft_s, behavior.ttft_jitter) + (length / tps if tps > 0 else 0.0)
        if await disconnect.sleep(delay):
            self.state.cancelled += 1
            return
        usage = {"prompt_tokens": _prompt_tokens(body), "completion_tokens": length, "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + length
        created = int(time.time())
        choice: dict[str, Any]
        if path.endswith("/chat/completions"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if behavior.tool_call:
                message = {"role": "assistant", "content": None, "tool_calls": [_tool_call(text)]}
                finish = "tool_calls"
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        choices = [dict(choice, index=i) for i in range(_n(body))]
        payload = {"id": f"fake-{self.state.requests}", "object": obj, "created": created, "model": model}
        payload.update(choices=choices, usage=usage)
        self.state.completed += 1
        await _send_json(send, 200, payload)

    async def _embeddings(self, send: Send, body: dict[str, Any], behavior: FakeBehavior, model: str) -> None:
        inputs = body.get("input")
        items = inputs if isinstance(inputs, list) else [inputs]
        if behavior.ttft_s > 0:
            await asyncio.sleep(self._jittered(behavior.ttft_s, behavior.ttft_jitter))
        data = []
        for index, item in enumerate(items):
            vector = [((hash(str(item)) >> (i % 32)) % 1000) / 1000.0 for i in range(behavior.embedding_dim)]
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(max(1, len(str(item)) // 4) for item in items)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self.state.completed += 1
        await _send_json(send, 200, {"object": "list", "data": data, "model": model, "usage": usage})

    async def _stream(
        self, send: Send, body: dict[str, Any], behavior: FakeBehavior, model: str, path: str, disconnect: _Disconnect
    ) -> None:
        chat = path.endswith("/chat/completions")
        skip, length, finish = self._answer_plan(body, behavior, path)
        words = answer_words(skip, length)
        ttft = self._jittered(behavior.ttft_s, behavior.ttft_jitter)
        tps = self._jittered(behavior.tokens_per_s, behavior.tps_jitter)
        head: dict[str, Any] = {
            "id": f"fake-{self.state.requests}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }

        def event(choice: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n"

        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        self.state.open_streams += 1
        self.state.max_open_streams = max(self.state.max_open_streams, self.state.open_streams)
        try:
            if chat:
                # The role chunk carries no output: TTFT is not over until the first content.
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                await send({"type": "http.response.body", "body": event(role), "more_body": True})
            if await disconnect.sleep(ttft):
                self.state.cancelled += 1
                return
            started = time.perf_counter()
            for i in range(behavior.reasoning_tokens):
                piece = {"index": 0, "delta": {"reasoning_content": answer_words(i, 1)[0]}, "finish_reason": None}
                await send({"type": "http.response.body", "body": event(piece), "more_body": True})
            step = max(1, behavior.chunk_tokens)
            chunks = 0
            for start in range(0, len(words), step):
                if chunks == behavior.drop_after:
                    raise _Drop
                if chunks == behavior.stall_after and await disconnect.sleep(behavior.stall_s):
                    self.state.cancelled += 1
                    return
                if chunks == behavior.malformed_after:
                    await send({"type": "http.response.body", "body": b"data: {not json\n\n", "more_body": True})
                if chunks == behavior.error_event_after:
                    message = f"fake {self.name}: error mid-stream"
                    error = {"error": {"message": message, "type": "server_error", "code": behavior.error_code}}
                    await send({"type": "http.response.body", "body": b"data: " + json.dumps(error).encode() + b"\n\n"})
                    return
                if tps > 0 and start > 0:
                    due = started + start / tps
                    if await disconnect.sleep(due - time.perf_counter()):
                        self.state.cancelled += 1
                        return
                text = "".join(words[start : start + step])
                piece = _piece(chat, text, behavior.tool_call, first=start == 0)
                await send({"type": "http.response.body", "body": event(piece), "more_body": True})
                chunks += 1
            if chunks == behavior.drop_after:
                raise _Drop
            tail = b""
            if not behavior.no_finish:
                reason = "tool_calls" if behavior.tool_call and chat else finish
                done: dict[str, Any] = {"index": 0, "finish_reason": reason}
                if chat:
                    done["delta"] = {}
                else:
                    done["text"] = ""
                tail += event(done)
            if behavior.linger_s > 0:
                await send({"type": "http.response.body", "body": tail, "more_body": True})
                tail = b""
                if await disconnect.sleep(behavior.linger_s):
                    self.state.cancelled += 1
                    return
            options = body.get("stream_options")
            if isinstance(options, dict) and options.get("include_usage"):
                prompt = _prompt_tokens(body)
                usage = {"prompt_tokens": prompt, "completion_tokens": length, "total_tokens": prompt + length}
                tail += b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode() + b"\n\n"
            if not behavior.no_done:
                tail += b"data: [DONE]\n\n"
            self.state.completed += 1
        finally:
            self.state.open_streams -= 1
        # Sent after the counts: a client that has read [DONE] finds the stream completed and
        # closed, with no window in which the counters lag.
        await send({"type": "http.response.body", "body": tail, "more_body": False})


def _prefill_words(body: dict[str, Any], path: str) -> int:
    """Answer words already given: a chat's last assistant message, or the end of a completion's prompt.

    A chat prefill is taken to be the answer's beginning whatever it says (its words are
    counted). A prompt is continued only where it ends with the answer's first words, so that
    ordinary prompts are answered from the start.
    """
    if path.endswith("/chat/completions"):
        messages = body.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
            last = messages[-1]
            if last.get("role") == "assistant" and isinstance(last.get("content"), str):
                return len(last["content"].split())
        return 0
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        return 0
    words = prompt.split()
    if not words or prompt[-1].isspace():
        return 0
    final = words[-1]
    # Only lengths whose last answer word is the prompt's last word can match: few to try.
    for count in range(len(words), 0, -1):
        if WORDS[(count - 1) % len(WORDS)] == final and prompt.endswith("".join(answer_words(0, count))):
            return count
    return 0


def _piece(chat: bool, text: str, tool_call: bool, *, first: bool) -> dict[str, Any]:
    if not chat:
        return {"index": 0, "text": text, "finish_reason": None}
    if tool_call:
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if first:
            call.update(id="call_fake", type="function")
            call["function"]["name"] = "lookup"
        return {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
    return {"index": 0, "delta": {"content": text}, "finish_reason": None}


def _tool_call(arguments: str) -> dict[str, Any]:
    return {"id": "call_fake", "type": "function", "function": {"name": "lookup", "arguments": arguments}}


def _n(body: dict[str, Any]) -> int:
    n = body.get("n", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 16 else 1


def _prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages", body.get("prompt", "")))) // 4)


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


async def _send_json(send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(payload).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": start_headers + (headers or [])})
    await send({"type": "http.response.body", "body": body})


async def _send_error(
    send: Send,
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    error = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    await _send_json(send, status, error, headers)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
