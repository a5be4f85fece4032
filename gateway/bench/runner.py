"""The benchmark's requests and their measurement: the method of the public leaderboards.

The same requests go to every target (a configured provider's deployment called directly,
or a model through a running gateway): streamed, temperature 0, a 256-token output ceiling,
a per-request timeout, N requests per target at a chosen concurrency (default 1). Every
target works through the prompts in the same order; targets run side by side, so they are
measured over the same minutes.

Each response is measured exactly as the gateway measures what it relays: the same
``StreamMeter`` and the same pinned tokenizer, so TTFT (request sent → first chunk carrying
output), tokens/s (answer tokens over the answer window) and end-to-end (request sent → last
byte) mean here what they mean on the leaderboard. Timeouts and errors stay in the
denominator: see ``gateway.bench.report`` for how they rank in the percentiles.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from gateway.bench.tasks import Task
from gateway.bench.transport_errors import describe_transport_error
from gateway.dialects import dialect_for
from gateway.errors import describe_error_body
from gateway.meter import StreamMeter
from gateway.models_config import key_header, under
from gateway.quality import expectation_of, judge
from gateway.samples import Endpoint, Outcome, RequestKind, Validity
from gateway.sse import EventTooLarge
from gateway.tokens import TokenCounter
from gateway.upstream import DEFAULT_ANTHROPIC_VERSION

TargetKind = Literal["direct", "gateway"]
TEMPERATURE = 0
DEFAULT_MAX_TOKENS = 256
MAX_ERROR_CHARS = 200


class BenchError(Exception):
    """The benchmark cannot run as asked (no targets, unreachable gateway); the message says why."""


@dataclass(frozen=True, slots=True)
class BenchTarget:
    """One thing to measure: an OpenAI-compatible base URL and the model id to send it."""

    name: str
    kind: TargetKind
    base_url: str
    routed_model: str
    """Sent as ``model``: the provider's own id (direct) or the gateway's model name."""
    api_key: str | None = field(default=None, repr=False)
    api_key_header: str = "authorization"
    """The header the key goes in (``ProviderConfig.api_key_header``): ``authorization`` as ``Bearer <key>``."""
    model: str | None = None
    """The config's client-facing model name (direct targets); samples are filed under it."""
    deployment: str | None = None
    provider: str | None = None
    price_in: float = 0.0
    price_out: float = 0.0


@dataclass(frozen=True, slots=True)
class BenchSettings:
    requests: int = 20
    """Requests per target."""
    concurrency: int = 1
    """Requests in flight per target."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = 60.0
    """Per request, from sending it to its last byte."""
    api: Endpoint = "chat"
    """The API the requests speak: ``chat``, ``responses`` (OpenAI's Responses API) or ``messages``
    (Anthropic's Messages API); the same prompts, in that API's shape."""


BENCH_APIS: tuple[Endpoint, ...] = ("chat", "responses", "messages")
_PATHS: dict[Endpoint, str] = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request's measurements; ``None`` where nothing could be measured (never zero)."""

    target: str
    index: int
    prompt: int
    """Index of the prompt in the prompt set."""
    outcome: Outcome
    started_at: float
    """Wall-clock (unix) time the request was sent."""
    status: int | None = None
    ttft_s: float | None = None
    first_answer_s: float | None = None
    tokens_per_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    prompt_tokens_estimate: int | None = None
    error: str | None = None
    served_by: str | None = None
    """Through a gateway: the provider that answered (its ``x-gateway-provider`` header); None otherwise."""
    correct: bool | None = None
    """With tasks (``gateway.bench.tasks``): the answer was exactly right (a failure is wrong); None without."""
    validity: Validity | None = None
    """A complete answer's verdict (``gateway.quality``); None when there was no complete answer."""
    kind: RequestKind | None = None
    """What the request asked of its answer (tools, JSON, plain)."""


def request_body(prompt: Mapping[str, Any], routed_model: str, max_tokens: int, api: Endpoint = "chat") -> bytes:
    """The prompt as the benchmark sends it: streamed, temperature 0, output capped at ``max_tokens``.

    Prompts are chat request bodies; for the Responses API their messages become ``input``, for the
    Messages API their system messages become ``system``.
    """
    body = dict(prompt)
    body.update(model=routed_model, stream=True, temperature=TEMPERATURE)
    if api == "responses":
        limit = body.pop("max_completion_tokens", body.pop("max_tokens", None))
        body["input"] = body.pop("messages", [])
        body["max_output_tokens"] = min(_positive(limit, max_tokens), max_tokens)
        return json.dumps(body, ensure_ascii=False).encode()
    if api == "messages":
        limit = body.pop("max_completion_tokens", body.pop("max_tokens", None))
        messages = [m for m in body.pop("messages", []) if isinstance(m, dict)]
        system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
        body["messages"] = [m for m in messages if m.get("role") != "system"]
        if system:
            body["system"] = "\n".join(system)
        body["max_tokens"] = min(_positive(limit, max_tokens), max_tokens)
        return json.dumps(body, ensure_ascii=False).encode()
    if "max_completion_tokens" in body:
        body["max_completion_tokens"] = min(_positive(body["max_completion_tokens"], max_tokens), max_tokens)
    else:
        body["max_tokens"] = min(_positive(body.get("max_tokens"), max_tokens), max_tokens)
    return json.dumps(body, ensure_ascii=False).encode()


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


class BenchRunner:
    """Runs the benchmark: every target in parallel, each with ``concurrency`` workers over its N requests.

    ``on_start`` hears each request as it is sent and ``on_result`` as it finishes (for progress).
    Create and run in one event loop.
    """

    def __init__(
        self,
        targets: Sequence[BenchTarget],
        prompts: Sequence[Mapping[str, Any]],
        settings: BenchSettings,
        counter: TokenCounter,
        on_result: Callable[[RequestResult], None] | None = None,
        on_start: Callable[[BenchTarget], None] | None = None,
        tasks: Sequence[Task] = (),
    ) -> None:
        if not targets:
            raise BenchError("nothing to benchmark: give -c CONFIG and/or --url URL")
        if tasks:
            # Each task's request in the benchmark's API, graded by its own rubric (``prompts`` index the tasks).
            prompts = [task.request_for(settings.api) for task in tasks]
        if not prompts:
            raise BenchError("no prompts")
        self.tasks = list(tasks)
        self.targets = list(targets)
        self.prompts = list(prompts)
        self.settings = settings
        self.counter = counter
        self.on_result = on_result
        self.on_start = on_start
        self.results: list[RequestResult] = []
        """Every finished request so far: what an interrupted run can still report."""

    async def run(self) -> list[RequestResult]:
        results = self.results
        workers = max(1, self.settings.concurrency)
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            jobs: list[Awaitable[None]] = []
            for target in self.targets:
                indices = iter(range(self.settings.requests))
                jobs.extend(self._worker(session, target, indices, results) for _ in range(workers))
            await asyncio.gather(*jobs)
        return self.finished()

    def finished(self) -> list[RequestResult]:
        """The finished requests, in target and request order."""
        return sorted(self.results, key=lambda r: (r.target, r.index))

    async def _worker(
        self, session: aiohttp.ClientSession, target: BenchTarget, indices: Iterator[int], out: list[RequestResult]
    ) -> None:
        for index in indices:
            if self.on_start is not None:
                self.on_start(target)
            result = await self.measure(session, target, index)
            out.append(result)
            if self.on_result is not None:
                self.on_result(result)

    async def measure(self, session: aiohttp.ClientSession, target: BenchTarget, index: int) -> RequestResult:
        """Send request ``index`` to ``target`` and measure it; never raises for what the target does."""
        prompt = index % len(self.prompts)
        api = self.settings.api
        body = request_body(self.prompts[prompt], target.routed_model, self.settings.max_tokens, api)
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if api == "messages":
            headers["anthropic-version"] = DEFAULT_ANTHROPIC_VERSION
            if target.api_key:
                headers["x-api-key"] = target.api_key
        elif target.api_key:
            header, value = key_header(target.api_key_header, target.api_key)
            headers[header] = value
        for last_try in (False, True):
            started_at = time.time()
            sent_at = time.perf_counter()
            meter = StreamMeter(time.perf_counter, sent_at, dialect_for(api))
            last_at: float | None = None
            status: int | None = None
            served_by: str | None = None
            outcome: Outcome | None = None
            error: str | None = None
            try:
                async with asyncio.timeout(self.settings.timeout_s):
                    url = under(target.base_url, _PATHS[api])
                    async with session.post(url, data=body, headers=headers) as response:
                        status = response.status
                        if target.kind == "gateway":
                            served_by = response.headers.get("x-gateway-provider") or None
                        if status != 200:
                            outcome, error = "upstream_error", _error_text(await response.content.read(4096), status)
                        else:
                            async for chunk in response.content.iter_any():
                                meter.feed(chunk)
                                last_at = time.perf_counter()
                            meter.end_of_stream()
            except TimeoutError:
                outcome, error = "timeout", f"no complete answer within {self.settings.timeout_s:g}s"
            except EventTooLarge as exc:
                outcome, error = "broken_stream", str(exc)
            except aiohttp.ClientError as exc:
                if not last_try and status is None and _stale(exc):
                    continue  # a kept-alive connection the server had closed: asked again on a new one
                outcome = "broken_stream" if meter.first_output_at is not None else "upstream_error"
                error = describe_transport_error(exc, mid_answer=status == 200)
            break
        reading = meter.finish(self.counter)
        if outcome is None:
            if reading.error_message is not None:
                outcome = "broken_stream" if reading.ttft_s is not None else "upstream_error"
                error = reading.error_message
            elif meter.done or reading.finished:
                outcome = "ok"
            else:
                outcome, error = "broken_stream", "the stream ended before the answer was complete"
        if error and target.api_key:
            error = error.replace(target.api_key, "***")
        expects = expectation_of(api, json.loads(body))
        validity = judge(reading, expects) if outcome == "ok" and expects.judged else None
        correct = None
        if self.tasks:
            correct = outcome == "ok" and self.tasks[prompt].grade(reading)
        return RequestResult(
            target=target.name,
            index=index,
            prompt=prompt,
            outcome=outcome,
            started_at=started_at,
            status=status,
            ttft_s=reading.ttft_s,
            first_answer_s=reading.first_answer_s,
            tokens_per_s=reading.tokens_per_s,
            e2e_s=None if last_at is None else last_at - sent_at,
            output_tokens=reading.output_tokens if status == 200 else None,
            usage_prompt_tokens=reading.usage_prompt_tokens,
            usage_completion_tokens=reading.usage_completion_tokens,
            prompt_tokens_estimate=max(1, len(body) // 4),
            error=None if error is None else error[:MAX_ERROR_CHARS],
            served_by=served_by,
            correct=correct,
            validity=validity,
            kind=expects.kind if expects.judged else None,
        )


def _stale(exc: aiohttp.ClientError) -> bool:
    """The server closed a pooled connection before this request's answer began (it never started on it):
    a new connection is the client's to try, not a failure of the provider. A new connection refused is not."""
    stale = isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))
    return stale and not isinstance(exc, aiohttp.ClientConnectorError)


def _error_text(body: bytes, status: int) -> str:
    message, _ = describe_error_body(body)
    return f"HTTP {status}: {message[:MAX_ERROR_CHARS]}"
