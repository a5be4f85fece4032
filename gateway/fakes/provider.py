"""A fake provider that speaks OpenAI's chat, completions, embeddings and Responses APIs and
Anthropic's Messages API, streamed or not, with configurable speed and faults.

Why it exists: the gateway's tests, demo and benchmarks need upstreams whose behaviour is
known exactly (first-token time, tokens per second, answer length) and that misbehave on
demand (error statuses, hangs, stalls, dropped connections, malformed chunks, no stream ending),
over real HTTP. It is a plain ASGI app, so that it is fast enough to be the "direct" baseline
of the overhead benchmark.

Behaviour is a ``FakeBehavior`` set per server and overridable per request, in the request
body's ``fake`` object (which the gateway relays untouched), e.g.::

    {"model": "m", "messages": [...], "fake": {"ttft_s": 0.2, "servers": {"slow": {"status": 503}}}}

Fields at the top of ``fake`` apply to every server; those under ``servers.<name>`` only to the
server of that name. ``POST /_fake/behavior`` changes a running server's behaviour and
``GET /_fake/state`` reports its counters. Each API lives in its own module (``chat``,
``responses``, ``messages``); the faults are played the same way in all of them (``pacing``).

The answer is made of words that are one token each in both ``o200k_base`` and
``cl100k_base``, so ``output_tokens`` is exactly what the gateway's meter should count.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from typing import Any, cast

from starlette.types import Receive, Scope, Send

from gateway.fakes import agent, chat, messages, quality, reasoning, responses
from gateway.fakes.asgi import Disconnect, lifespan, quiet_planned_drops, read_body, send_error, send_json
from gateway.fakes.behavior import WORDS, FakeBehavior, FakeState, RecordedRequest, answer_words
from gateway.fakes.cache import CURRENT, CacheUsage
from gateway.fakes.capacity import Slots

_INFERENCE = ("/chat/completions", "/completions", "/embeddings", "/responses", "/messages")
NO_IMAGES = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
"""llama.cpp's server's words (and 500) for an image sent to a model without its projector."""
_IMAGE_PARTS = frozenset({"image_url", "image", "input_image"})


class FakeProvider:
    """The ASGI app. ``name`` tells the server apart in per-request overrides.

    ``record=True`` keeps every request (path, headers, body) in ``state.recorded`` for tests.
    ``api_key`` set: requests without it get a 401 (``Authorization: Bearer <key>``; for the Messages
    API also ``x-api-key: <key>``, as Anthropic takes either).
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
        self.slots = Slots()
        self._rng = random.Random(self.behavior.seed)
        quiet_planned_drops()

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/_fake/state" and method == "GET":
            await send_json(send, 200, self.snapshot())
            return
        if path == "/_fake/behavior" and method == "POST":
            body = await read_body(receive)
            try:
                self.behavior = self.behavior.merged(json.loads(body or b"{}"))
            except (ValueError, TypeError) as exc:
                await send_error(send, 400, str(exc), "invalid_request_error")
                return
            await send_json(send, 200, dataclasses.asdict(self.behavior))
            return
        if path.endswith("/models") and method == "GET":
            await self._models(send)
            return
        if "/responses/" in path:
            self._note(scope, path, None)
            await responses.stored(self, send, method, path)
            return
        if path.endswith("/messages/count_tokens") and method == "POST":
            body_data = _json_object(await read_body(receive))
            self._note(scope, path, body_data)
            if not self.behavior.count_tokens:
                await messages.send_anthropic_error(send, 404, f"fake {self.name}: no count_tokens endpoint")
                return
            await messages.count_tokens(send, body_data or {})
            return
        if method != "POST" or not path.endswith(_INFERENCE):
            await send_error(send, 404, f"no route {method} {path}", "invalid_request_error")
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
            "in_flight": self.state.in_flight,
            "max_in_flight": self.state.max_in_flight,
            "refused": self.state.refused,
            "cache": self.state.cache.counters.as_dict(),
        }

    def jittered(self, value: float, sigma: float) -> float:
        return _jittered(self._rng, value, sigma)

    def _note(self, scope: Scope, path: str, body: dict[str, Any] | None) -> dict[str, str]:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if self.record:
            query = scope.get("query_string", b"").decode("latin-1")
            self.state.recorded.append(RecordedRequest(path=path, headers=headers, body=body, query=query))
        return headers

    async def _models(self, send: Send) -> None:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": self.name} for m in self.models]
        await send_json(send, 200, {"object": "list", "data": data})

    async def _inference(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        self.state.requests += 1
        self.state.last_request_at = time.monotonic()
        number = self.state.requests
        anthropic = path.endswith("/messages")
        body = _json_object(await read_body(receive))
        if body is None:
            await self._error(send, anthropic, 400, "invalid JSON body", "invalid_request_error")
            return
        headers = self._note(scope, path, body)
        if self.api_key is not None:
            bearer = headers.get("authorization") == f"Bearer {self.api_key}"
            if not (bearer or (anthropic and headers.get("x-api-key") == self.api_key)):
                # As providers answer a wrong key: quoting it (OpenAI masks its middle; the fake quotes it whole).
                message = f"Incorrect API key provided: {_presented_key(headers)}"
                await self._error(send, anthropic, 401, message, "invalid_request_error", "invalid_api_key")
                return
        try:
            behavior = agent.steer(body, path, self._behavior_for(body, headers))
        except (ValueError, TypeError) as exc:
            await self._error(send, anthropic, 400, f"fake: {exc}", "invalid_request_error")
            return
        size = len(json.dumps(body)) // 4
        if behavior.context_window and size > behavior.context_window:
            message = (
                f"This model's maximum context length is {behavior.context_window} tokens. "
                f"However, your messages resulted in {size} tokens."
            )
            await self._error(send, anthropic, 400, message, "invalid_request_error", "context_length_exceeded")
            return
        if behavior.text_only and _shows_image(body.get("messages", body.get("input"))):
            await self._error(send, anthropic, 500, NO_IMAGES, "server_error")
            return
        if behavior.reject_prefill and chat.prefill_words(body, path):
            message = f"fake {self.name}: an assistant prefill cannot be continued here"
            await self._error(send, anthropic, 400, message, "invalid_request_error", "prefill_unsupported")
            return
        fault = reasoning.fault(path, body, behavior)
        if fault is not None:
            await self._error(send, anthropic, 400, fault, "invalid_request_error")
            return
        disconnect = Disconnect(receive)
        state = self.state
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        slot = False
        try:
            if behavior.ratelimit_remaining == 0 or (
                behavior.slots and behavior.over_slots == "reject" and self.slots.full(behavior.slots)
            ):
                state.refused += 1
                await self._refuse(send, anthropic, behavior)
                return
            if behavior.slots:
                slot = await self.slots.take(behavior.slots, disconnect)
                if not slot:
                    state.cancelled += 1
                    return
            if behavior.hang_s > 0 and await disconnect.sleep(behavior.hang_s):
                self.state.cancelled += 1
                return
            if self._fails(behavior, number):
                extra = [(b"retry-after", behavior.retry_after.encode())] if behavior.retry_after else []
                kind = "rate_limit_error" if behavior.status == 429 else "invalid_request_error"
                if behavior.status >= 500:
                    kind = "server_error"
                message = f"fake {self.name}: error {behavior.status}"
                if behavior.echo_key:
                    message += f" (you sent the key {_presented_key(headers)})"
                await self._error(send, anthropic, behavior.status, message, kind, behavior.error_code, extra)
                return
            model = behavior.model or str(body.get("model", "fake-model"))
            behavior = self._use_prompt(body, behavior, path)
            if not path.endswith("/embeddings"):
                behavior = quality.prepared(behavior, body, path, self._rng)
            if path.endswith("/embeddings"):
                await chat.embeddings(self, send, body, behavior, model)
            elif path.endswith("/responses"):
                await responses.create(self, send, body, behavior, model, disconnect)
            elif anthropic:
                await messages.create(self, send, body, behavior, model, disconnect)
            elif body.get("stream") is True:
                await chat.stream(self, send, body, behavior, model, path, disconnect)
            else:
                await chat.complete(self, send, body, behavior, model, path, disconnect)
        finally:
            state.in_flight -= 1
            if slot:
                self.slots.give_back(behavior.slots)
            disconnect.close()

    async def _refuse(self, send: Send, anthropic: bool, behavior: FakeBehavior) -> None:
        """A 429 above the slots (or out of budget), with the rate-limit headers a provider sends."""
        remaining = behavior.ratelimit_remaining if behavior.ratelimit_remaining is not None else 1000
        headers = [
            (b"x-ratelimit-limit-requests", b"10000"),
            (b"x-ratelimit-remaining-requests", str(remaining).encode()),
            (b"x-ratelimit-reset-requests", behavior.ratelimit_reset.encode()),
        ]
        if behavior.retry_after:
            headers.append((b"retry-after", behavior.retry_after.encode()))
        why = "out of request budget" if remaining == 0 else f"over capacity ({behavior.slots} at once)"
        message = f"fake {self.name}: {why}"
        await self._error(send, anthropic, 429, message, "rate_limit_error", "rate_limit_exceeded", headers)

    async def _error(
        self,
        send: Send,
        anthropic: bool,
        status: int,
        message: str,
        kind: str,
        code: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        if anthropic:
            await messages.send_anthropic_error(send, status, message, headers)
        else:
            await send_error(send, status, message, kind, code, headers)

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
        behavior = behavior.merged(overrides) if overrides else behavior
        return self._drawn(behavior) if behavior.draw_seed is not None else behavior

    def _drawn(self, behavior: FakeBehavior) -> FakeBehavior:
        """The request's own draws (``draw_seed``), made now: its first token, speed and failure, jitter spent."""
        rng = random.Random(f"{self.name}:{behavior.draw_seed}")
        ttft = _jittered(rng, behavior.ttft_s, behavior.ttft_jitter)
        tps = _jittered(rng, behavior.tokens_per_s, behavior.tps_jitter)
        fails = rng.random() < behavior.error_rate
        return dataclasses.replace(
            behavior,
            ttft_s=ttft,
            ttft_jitter=0.0,
            tokens_per_s=tps,
            tps_jitter=0.0,
            error_rate=(1.0 if fails else 0.0) if 0.0 < behavior.error_rate < 1.0 else behavior.error_rate,
        )

    def _use_prompt(self, body: dict[str, Any], behavior: FakeBehavior, path: str) -> FakeBehavior:
        """Judge the prompt against the cache: usage reports it (``cache.CURRENT``), the first token waits."""
        if path.endswith("/embeddings") or (behavior.cache_prompts <= 0 and behavior.prefill_tokens_per_s <= 0):
            return behavior
        use = self.state.cache.serve(
            body,
            chat.prompt_tokens(body),
            time.monotonic(),
            capacity=behavior.cache_prompts,
            ttl_s=behavior.cache_ttl_s,
            min_tokens=behavior.cache_min_tokens,
            prefill_tokens_per_s=behavior.prefill_tokens_per_s,
            usage_shape=cast(CacheUsage, behavior.cache_usage),
        )
        CURRENT.set(use)
        return dataclasses.replace(behavior, ttft_s=behavior.ttft_s + use.prefill_s) if use.prefill_s else behavior

    def _fails(self, behavior: FakeBehavior, number: int) -> bool:
        if behavior.status == 200:
            return False
        if behavior.fail_first and number > behavior.fail_first:
            return False
        return behavior.error_rate >= 1.0 or self._rng.random() < behavior.error_rate


def _jittered(rng: random.Random, value: float, sigma: float) -> float:
    """``value`` times a log-normal draw of spread ``sigma`` (as it is when either is 0)."""
    return value * rng.lognormvariate(0.0, sigma) if sigma > 0 and value > 0 else value


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _shows_image(value: Any) -> bool:
    """Whether a request's messages (or Responses input) hold an image part, in any of the APIs' shapes."""
    if isinstance(value, dict):
        return value.get("type") in _IMAGE_PARTS or any(_shows_image(item) for item in value.values())
    return isinstance(value, list) and any(_shows_image(item) for item in value)


__all__ = ["WORDS", "FakeBehavior", "FakeProvider", "FakeState", "RecordedRequest", "answer_words"]


def _presented_key(headers: dict[str, str]) -> str:
    """The key a request carried (``x-api-key``, else the bearer token), as a provider quoting it would."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
