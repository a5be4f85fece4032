"""The attempt loop and the streaming relay.

``Dispatcher.dispatch`` tries a plan's candidates in order until one starts answering. Before
any byte has reached the client, a failed attempt (connect error, 5xx, 429, first-token
timeout, a stream that breaks before its first token) moves on to the next candidate, within
the policy's attempt count and total deadline. An upstream 4xx that is the request's own
fault (400, 413, 422: context length, content filter, bad parameters) is relayed as is.

A stream is committed to the client when its first output-bearing chunk arrives; from then
on, bytes go to the client as they come, each chunk flushed at once and never re-serialised,
while a ``StreamMeter`` watches them on the side. If the upstream breaks after that, the
client's stream ends with an OpenAI-shaped error event, never as if the answer were complete.

Every attempt, failed or not, yields one ``Sample`` for the sink.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import (
    GatewayError,
    NoCapacity,
    RateLimited,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.meter import Clock, Reading, StreamMeter, read_body
from gateway.metrics import Metrics
from gateway.routing import Candidate, NullObserver, RoutePlan, Router, RouteReason, RoutingObserver
from gateway.samples import Endpoint, Outcome, Sample, SampleSink
from gateway.tokens import TokenCounter
from gateway.upstream import MAX_ERROR_BODY, AttemptTimeouts, UpstreamPool, UpstreamResponse

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

# Upstream statuses that are the request's fault: relayed to the client, never retried, and
# not held against the provider's health.
CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})


@dataclass(slots=True)
class RequestTrace:
    """What the attempts of one request left behind, for the access log and the overhead metric.

    Filled in by the dispatcher as the request goes; per request, not shared.
    """

    samples: list[Sample] = field(default_factory=list)
    """Every attempt's ``Sample``, in the order the attempts ended."""
    upstream_sent_at: float | None = None
    """Clock reading when the first attempt's upstream request was sent."""
    upstream_ready_at: float | None = None
    """Clock reading when the committed attempt was ready: its first output chunk, or its whole body."""
    answer_text: str | None = None
    """The committed answer's text (only ever logged when ``server.log_bodies`` is on)."""


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """A validated client request, ready to be sent upstream. ``body`` no longer holds ``provider``."""

    request_id: str
    endpoint: Endpoint
    path: str
    """The OpenAI path below ``/v1``, e.g. ``/chat/completions``; appended to the provider's base URL."""
    body: dict[str, Any]
    stream: bool
    requested_model: str
    received_at: float
    """Clock reading when the gateway received the request (end-to-end starts here)."""
    headers: list[tuple[str, str]] = field(default_factory=list)
    prompt_tokens: int = 0
    trace: RequestTrace = field(default_factory=RequestTrace)

    def body_for(self, routed_model: str) -> bytes:
        """The body as sent upstream: the client's fields untouched but for ``model``."""
        body = dict(self.body)
        body["model"] = routed_model
        try:
            return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        except UnicodeEncodeError:
            # A lone surrogate ("\ud800" in the client's JSON) has no UTF-8 form: keep it escaped.
            return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class AttemptLog:
    """What the attempts of one request did, for the response headers."""

    attempts: int = 0
    winner: Candidate | None = None
    route: RouteReason = "best-score"
    clock: Clock = time.perf_counter
    status: int | None = None
    """The status sent to the client, once the reply started."""
    first_byte_at: float | None = None
    """Clock reading once the reply's first body bytes were handed to the server."""

    def commit(self, attempt: _Attempt) -> None:
        """Note the attempt whose answer goes to the client, and why it was the one."""
        self.winner = attempt.candidate
        if attempt.is_hedge:
            self.route = "hedge"
        else:
            self.route = attempt.candidate.reason if attempt.number == 1 else "fallback"


class _ClientFault(Exception):
    """An upstream 4xx that is the request's fault: relayed to the client as is."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.content_type = content_type


class Dispatcher:
    """Runs the attempts of requests. One per app; holds no per-request state."""

    def __init__(
        self,
        upstreams: UpstreamPool,
        router: Router,
        sink: SampleSink,
        counter: TokenCounter,
        *,
        clock: Clock = time.perf_counter,
        wall_clock: Clock = time.time,
        metrics: Metrics | None = None,
        observer: RoutingObserver | None = None,
    ) -> None:
        self.upstreams = upstreams
        self.router = router
        self.sink = sink
        self.counter = counter
        self.clock = clock
        self.wall_clock = wall_clock
        self.metrics = metrics if metrics is not None else Metrics(process_metrics=False)
        self.observer: RoutingObserver = observer if observer is not None else NullObserver()

    async def dispatch(self, request: ProxyRequest, plan: RoutePlan) -> Reply:
        """Try the plan's candidates until one answers; raise the right ``GatewayError`` if none does."""
        if request.stream and plan.candidates and plan.candidates[0].hedge_after_s is not None:
            return await self._race(request, plan)
        policy = plan.policy
        deadline = request.received_at + policy.total_timeout_s
        log = AttemptLog(clock=self.clock)
        errors: list[UpstreamError] = []
        for candidate in plan.candidates:
            remaining = deadline - self.clock()
            if log.attempts >= policy.max_attempts or remaining <= 0:
                break
            attempt = self._admit(request, candidate)
            if attempt is None:
                continue
            if errors:
                self._fallback(request, errors[-1], candidate)
            log.attempts += 1
            attempt.number = log.attempts
            try:
                await self._open(request, plan, attempt, remaining)
            except UpstreamError as exc:
                exc.provider = exc.provider or candidate.provider.name
                errors.append(exc)
                continue
            except _ClientFault as fault:
                log.commit(attempt)
                return FullReply(fault.status, fault.body, fault.content_type, log)
            self._commit(request, log, attempt)
            if request.stream:
                return StreamReply(self, request, attempt, log)
            return await self._finish_full(request, attempt, log)
        error = _final_error(errors, log.attempts, deadline_passed=self.clock() >= deadline)
        error.headers["x-gateway-attempts"] = str(log.attempts)
        raise error

    async def _race(self, request: ProxyRequest, plan: RoutePlan) -> Reply:
        """The attempt loop with hedging: attempts run as tasks, and the first to produce a token wins.

        When the primary's first token is later than its ``hedge_after_s`` (and the model's
        hedge budget allows), the next candidate starts beside it. Whichever produces a token
        first is committed; the other is cancelled, which closes its upstream connection and
        records its sample (``hedged=True``, its prompt's cost counted). A failure of either
        leaves the other running; when both have failed, plain fallback goes on.
        """
        policy = plan.policy
        model = plan.candidates[0].model
        deadline = request.received_at + policy.total_timeout_s
        log = AttemptLog(clock=self.clock)
        errors: list[UpstreamError] = []
        queue = list(plan.candidates)
        pending: dict[asyncio.Task[None], _Attempt] = {}
        hedge_tried = False

        def start_next(as_hedge: bool) -> _Attempt | None:
            while queue and log.attempts < policy.max_attempts:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return None
                attempt = self._admit(request, queue.pop(0))
                if attempt is None:
                    continue
                log.attempts += 1
                attempt.number = log.attempts
                attempt.is_hedge = attempt.hedged = as_hedge
                pending[asyncio.ensure_future(self._open(request, plan, attempt, remaining))] = attempt
                return attempt
            return None

        try:
            while True:
                if not pending:
                    started = start_next(False)
                    if started is None:
                        break
                    if errors:
                        self._fallback(request, errors[-1], started.candidate)
                timeout: float | None = None
                primary = next(iter(pending.values()))
                if not hedge_tried and len(pending) == 1 and primary.candidate.hedge_after_s is not None:
                    timeout = max(0.0, primary.sent_at + primary.candidate.hedge_after_s - self.clock())
                done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    hedge_tried = True
                    if queue and log.attempts < policy.max_attempts and self.router.try_hedge(plan):
                        hedge = start_next(True)
                        if hedge is not None:
                            primary.hedged = True
                            self.observer.hedge_started(model, primary.candidate.name, hedge.candidate.name)
                    continue
                answered: list[_Attempt] = []
                for task in done:
                    attempt = pending.pop(task)
                    error = task.exception()
                    if error is None:
                        answered.append(attempt)
                    elif isinstance(error, UpstreamError):
                        error.provider = error.provider or attempt.candidate.provider.name
                        errors.append(error)
                    elif isinstance(error, _ClientFault):
                        log.commit(attempt)
                        return FullReply(error.status, error.body, error.content_type, log)
                    else:
                        raise error
                if answered:
                    answered.sort(key=_first_output_at)
                    for late in answered[1:]:
                        self._abandon(request, late)
                    winner = answered[0]
                    self._commit(request, log, winner)
                    if winner.hedged:
                        self._hedge_ended(model, winner, [*answered[1:], *pending.values()])
                    return StreamReply(self, request, winner, log)
        finally:
            # Losers (and, on a client disconnect, everyone) are cancelled; each records its own sample.
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        error = _final_error(errors, log.attempts, deadline_passed=self.clock() >= deadline)
        error.headers["x-gateway-attempts"] = str(log.attempts)
        raise error

    def _admit(self, request: ProxyRequest, candidate: Candidate) -> _Attempt | None:
        """Ask the router for a slot; None when the candidate may not be tried now (circuit, capacity)."""
        if not self.router.attempt_started(candidate):
            return None
        self.metrics.attempt_started(candidate.provider.name)
        attempt = _Attempt(candidate, sent_at=self.clock(), started_wall=self.wall_clock())
        if request.trace.upstream_sent_at is None:
            request.trace.upstream_sent_at = attempt.sent_at
        return attempt

    def _fallback(self, request: ProxyRequest, error: UpstreamError, next_candidate: Candidate) -> None:
        self.metrics.fallback(request.requested_model, error.provider)
        self.observer.fallback(request.requested_model, error.provider, next_candidate.name)

    def _commit(self, request: ProxyRequest, log: AttemptLog, attempt: _Attempt) -> None:
        log.commit(attempt)
        self.metrics.route_decided(request.requested_model, attempt.candidate.provider.name, log.route)

    def _hedge_ended(self, model: str, winner: _Attempt, losers: list[_Attempt]) -> None:
        self.metrics.hedge(model, winner.candidate.provider.name, "won")
        for loser in losers:
            self.metrics.hedge(model, loser.candidate.provider.name, "lost")
        hedge = winner if winner.is_hedge else next((a for a in losers if a.is_hedge), None)
        if hedge is winner:
            self.observer.hedge_won(model, winner.candidate.name)
        elif hedge is not None:
            self.observer.hedge_lost(model, hedge.candidate.name)

    async def _open(self, request: ProxyRequest, plan: RoutePlan, attempt: _Attempt, remaining: float) -> None:
        """Send one attempt and wait until it is safe to commit to it (headers, and first token for streams)."""
        policy = plan.policy
        candidate = attempt.candidate
        client = self.upstreams[candidate.provider.name]
        timeouts = AttemptTimeouts(connect_s=policy.connect_timeout_s, read_s=policy.idle_timeout_s, total_s=remaining)
        body = request.body_for(candidate.deployment.model)
        first_token_s = min(policy.first_token_timeout_s, remaining)
        try:
            if request.stream:
                async with asyncio.timeout(first_token_s):
                    attempt.response = await client.send(request.path, body, timeouts, request.headers)
                    await self._check_status(attempt, client.redact)
                    await self._await_first_token(attempt)
            else:
                attempt.response = await client.send(request.path, body, timeouts, request.headers)
                await self._check_status(attempt, client.redact)
                attempt.body = client.redact(await attempt.response.read_all())
        except TimeoutError as exc:
            name = candidate.provider.name
            error = UpstreamTimeout(f"{name}: no first token within {first_token_s:g}s", provider=name)
            self._fail(request, attempt, "timeout", error)
            raise error from exc
        except UpstreamTimeout as exc:
            self._fail(request, attempt, "timeout", exc)
            raise
        except UpstreamError as exc:
            self._fail(request, attempt, "broken_stream" if attempt.meter else "upstream_error", exc)
            raise
        except _ClientFault:
            self._fail(request, attempt, "client_error", None)
            raise
        except asyncio.CancelledError:
            self._fail(request, attempt, "client_cancelled", None)
            raise
        request.trace.upstream_ready_at = attempt.meter.first_output_at if attempt.meter else self.clock()

    async def _check_status(self, attempt: _Attempt, redact: Callable[[bytes], bytes]) -> None:
        response = attempt.response
        assert response is not None
        attempt.status = response.status
        if response.status < 400:
            return
        provider = attempt.candidate.provider.name
        body = redact(await response.read_all(MAX_ERROR_BODY))
        response.aclose()
        content_type = response.headers.get("content-type", "application/json")
        if response.status in CLIENT_FAULT_STATUSES:
            raise _ClientFault(response.status, body, content_type)
        message, code = _error_of(body)
        raise UpstreamStatusError(
            f"{provider}: upstream returned {response.status}: {message}",
            provider=provider,
            status=response.status,
            code=code,
            retry_after_s=_retry_after(response.headers.get("retry-after"), self.wall_clock()),
        )

    async def _await_first_token(self, attempt: _Attempt) -> None:
        """Read (and hold back) chunks until one carries output, ``[DONE]`` comes, or the stream ends."""
        response = attempt.response
        assert response is not None
        meter = attempt.meter = StreamMeter(self.clock, attempt.sent_at)
        while meter.first_output_at is None and not meter.done:
            chunk = await response.read_chunk()
            if not chunk:
                meter.end_of_stream()
                if meter.first_output_at is None and not meter.done and not meter.finish_seen:
                    name = attempt.candidate.provider.name
                    raise UpstreamUnavailable(f"{name}: stream ended before any output", provider=name)
                break
            meter.feed(chunk)
            attempt.held.append(chunk)

    async def _finish_full(self, request: ProxyRequest, attempt: _Attempt, log: AttemptLog) -> FullReply:
        response = attempt.response
        assert response is not None
        response.aclose()
        content_type = response.headers.get("content-type", "application/json")
        status = 200 if attempt.status is None else attempt.status

        def finish() -> None:
            reading = read_body(attempt.body, self.counter)
            if request.endpoint == "embeddings":
                # Embeddings are measured by latency only: there are no output tokens to count.
                reading = dataclasses.replace(reading, output_tokens=None, answer_text="")
            outcome: Outcome = "upstream_error" if reading.error_message or reading.malformed else "ok"
            self.record(request, attempt, outcome, reading)

        return FullReply(status, attempt.body, content_type, log, finish)

    def _fail(self, request: ProxyRequest, attempt: _Attempt, outcome: Outcome, error: UpstreamError | None) -> None:
        if attempt.response is not None:
            attempt.response.aclose()
        status = attempt.status if attempt.status is not None else (error.upstream_status if error else None)
        ttft = attempt.meter.ttft_s if attempt.meter else None
        if ttft is None and outcome == "client_cancelled" and attempt.hedged and not attempt.is_hedge:
            # A primary cancelled while hedged had waited past its hedge threshold (about its own
            # p95) without a token. Its wait is recorded as a lower bound: that keeps every
            # quantile below the threshold exact, where dropping it would hide the slow tail.
            ttft = self.clock() - attempt.sent_at
        retry_after = error.retry_after_s if error is not None else None
        self.record(request, attempt, outcome, Reading(ttft_s=ttft), status, retry_after)

    def _abandon(self, request: ProxyRequest, attempt: _Attempt) -> None:
        """Drop an attempt that answered but lost the race (both produced a token at once)."""
        if attempt.response is not None:
            attempt.response.aclose()
        self.record(
            request, attempt, "client_cancelled", Reading(ttft_s=attempt.meter.ttft_s if attempt.meter else None)
        )

    def record(
        self,
        request: ProxyRequest,
        attempt: _Attempt,
        outcome: Outcome,
        reading: Reading,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> Sample:
        """Turn an ended attempt into a ``Sample``, hand it to the sink and tell the router."""
        deployment = attempt.candidate.deployment
        prompt = reading.usage_prompt_tokens if reading.usage_prompt_tokens is not None else request.prompt_tokens
        output = reading.usage_completion_tokens
        if output is None:
            output = reading.output_tokens
        cost = None
        # A hedge's loser was still billed for its prompt once the provider had started on it.
        if outcome == "ok" or output or (attempt.hedged and attempt.status is not None and attempt.status < 400):
            cost = (prompt * deployment.price_in + (output or 0) * deployment.price_out) / 1e6
        sample = Sample(
            model=request.requested_model,
            deployment=deployment.name,
            provider=attempt.candidate.provider.name,
            endpoint=request.endpoint,
            stream=request.stream,
            outcome=outcome,
            started_at=attempt.started_wall,
            status=status if status is not None else attempt.status,
            ttft_s=reading.ttft_s,
            first_answer_s=reading.first_answer_s,
            tokens_per_s=reading.tokens_per_s,
            e2e_s=self.clock() - request.received_at,
            output_tokens=reading.output_tokens,
            usage_prompt_tokens=reading.usage_prompt_tokens,
            usage_completion_tokens=reading.usage_completion_tokens,
            prompt_tokens_estimate=request.prompt_tokens,
            cost_usd=cost,
            hedged=attempt.hedged,
        )
        self.router.attempt_finished(attempt.candidate, sample, retry_after_s)
        self.metrics.attempt_ended(sample.provider)
        request.trace.samples.append(sample)
        if outcome == "ok":
            request.trace.answer_text = reading.answer_text
        self.sink.record(sample)
        return sample


@dataclass(slots=True)
class _Attempt:
    candidate: Candidate
    sent_at: float
    started_wall: float
    response: UpstreamResponse | None = None
    status: int | None = None
    meter: StreamMeter | None = None
    held: list[bytes] = field(default_factory=list)
    """Chunks read before the first token, sent to the client together with it."""
    body: bytes = b""
    hedged: bool = False
    """This attempt ran beside another (as the primary or as the hedge)."""
    is_hedge: bool = False
    """This attempt is the hedge, started because the primary's first token was late."""
    number: int = 0
    """1 for the request's first attempt, 2 for the next, ..."""


def _first_output_at(attempt: _Attempt) -> float:
    meter = attempt.meter
    return 0.0 if meter is None or meter.first_output_at is None else meter.first_output_at


class Reply:
    """A committed answer, ready to be written to the client."""

    log: AttemptLog

    def headers(self) -> list[tuple[bytes, bytes]]:
        winner = self.log.winner
        headers = [
            (b"x-gateway-attempts", str(self.log.attempts).encode()),
            (b"x-gateway-route", self.log.route.encode()),
        ]
        if winner is not None:
            headers.append((b"x-gateway-provider", winner.provider.name.encode()))
            headers.append((b"x-gateway-deployment", winner.deployment.name.encode()))
        return headers

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        raise NotImplementedError


class FullReply(Reply):
    """A whole JSON body: a non-streamed answer, or an upstream client-fault error relayed as is."""

    def __init__(
        self, status: int, body: bytes, content_type: str, log: AttemptLog, finish: Callable[[], None] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.log = log
        self._finish = finish

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        headers = [
            (b"content-type", self.content_type.encode("latin-1")),
            (b"content-length", str(len(self.body)).encode()),
            *self.headers(),
            *extra_headers,
        ]
        watch.disarm()
        try:
            self.log.status = self.status
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            await send({"type": "http.response.body", "body": self.body})
            self.log.first_byte_at = self.log.clock()
        finally:
            # The upstream answered in full: its sample is due even if the client is gone.
            if self._finish is not None:
                self._finish()


class StreamReply(Reply):
    """A stream committed to one attempt: held chunks first, then the rest as it arrives."""

    def __init__(self, dispatcher: Dispatcher, request: ProxyRequest, attempt: _Attempt, log: AttemptLog) -> None:
        self.dispatcher = dispatcher
        self.request = request
        self.attempt = attempt
        self.log = log

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        attempt = self.attempt
        response, meter = attempt.response, attempt.meter
        assert response is not None and meter is not None
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.headers(),
            *extra_headers,
        ]
        broken: UpstreamError | None = None
        outcome: Outcome = "ok"
        try:
            self.log.status = 200
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"".join(attempt.held), "more_body": True})
            self.log.first_byte_at = self.log.clock()
            attempt.held.clear()
            while not meter.done:
                chunk = await response.read_chunk()
                if not chunk:
                    meter.end_of_stream()
                    break
                meter.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamError as exc:
            broken = exc
        except asyncio.CancelledError:
            outcome = "client_cancelled"
            raise
        finally:
            response.aclose()
            if outcome == "client_cancelled":
                reading = meter.finish(self.dispatcher.counter)
                self.dispatcher.record(self.request, attempt, outcome, reading)
        watch.disarm()
        reading = meter.finish(self.dispatcher.counter)
        tail = b""
        if broken is not None and reading.finished and reading.error_message is None:
            # The answer was complete (finish_reason came); only the provider's [DONE] or its
            # close went missing: end the client's stream cleanly rather than as an error.
            tail = b"data: [DONE]\n\n"
        elif broken is not None:
            outcome = "timeout" if isinstance(broken, UpstreamTimeout) else "broken_stream"
            tail = _error_event(broken.message, "upstream_stream_broken")
        elif reading.error_message is not None:
            # The provider's own error event has told the client already.
            outcome = "upstream_error"
        elif not meter.done and not reading.finished:
            outcome = "broken_stream"
            name = attempt.candidate.provider.name
            tail = _error_event(
                f"{name}: upstream stream ended before the answer was complete", "upstream_stream_broken"
            )
        else:
            if not meter.done:
                # The answer is complete but the provider forgot [DONE]: end the stream cleanly.
                tail = b"data: [DONE]\n\n"
            if reading.malformed:
                # Relayed as is, but the client's SDK choked on it: not a success.
                outcome = "upstream_error"
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        self.dispatcher.record(self.request, attempt, outcome, reading)


def _error_event(message: str, code: str) -> bytes:
    error = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + json.dumps(error).encode() + b"\n\n"


class DisconnectWatch:
    """Cancels the request's task the moment the client hangs up, so the upstream is dropped at once.

    Must be created inside the task that serves the request, after the body was read, and
    disarmed before the last frame is sent (the server reports a disconnect once the response
    is complete, too).
    """

    def __init__(self, receive: Receive) -> None:
        self.disconnected = False
        self._armed = True
        self._task = asyncio.current_task()
        self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self._armed and self._task is not None:
                    self.disconnected = True
                    self._task.cancel()
                return

    def disarm(self) -> None:
        self._armed = False
        self._watcher.cancel()


def _error_of(body: bytes) -> tuple[str, str | None]:
    """The message and code of an upstream error body, whatever its shape."""
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return (text[:300] or "no error message"), None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        code = error.get("code")
        return str(error.get("message") or error)[:500], str(code) if code is not None else None
    if isinstance(error, str):
        return error[:500], None
    return str(data)[:300], None


def _retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def _final_error(errors: list[UpstreamError], attempts: int, *, deadline_passed: bool) -> GatewayError:
    """The client's error when no attempt answered: the last upstream's message and status kept."""
    if not errors:
        if deadline_passed:
            return UpstreamTimeout("the request's total deadline passed before any provider was tried")
        return NoCapacity("no provider is available for this model right now (all are failing or at capacity)")
    last = errors[-1]
    summary = f"no provider could answer ({attempts} attempt{'s' if attempts != 1 else ''}); last error: {last.message}"
    if all(isinstance(e, UpstreamStatusError) and e.upstream_status == 429 for e in errors):
        waits = [e.retry_after_s for e in errors if e.retry_after_s is not None]
        headers = {"retry-after": str(max(1, int(min(waits) + 0.999)))} if waits else {}
        return RateLimited(summary, code="upstream_rate_limited", headers=headers)
    if isinstance(last, UpstreamTimeout):
        return UpstreamTimeout(summary, provider=last.provider)
    if isinstance(last, UpstreamStatusError) and last.upstream_status == 503:
        return NoCapacity(summary, code="upstream_unavailable")
    return UpstreamUnavailable(summary, provider=last.provider, status=last.upstream_status, code=last.code)
