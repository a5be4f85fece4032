"""The attempt loop: a plan's candidates tried in order until one starts answering.

Before any byte has reached the client, a failed attempt (connect error, 5xx, 429, first-token
timeout, a stream that breaks or errs before its first token) moves on to the next candidate,
within the policy's attempt count and total deadline. An upstream 4xx that is the request's
own fault (400, 413, 422: context length, content filter, bad parameters) is relayed as is.
Streams whose first candidate carries a hedge threshold go through ``hedging.race`` instead.

Every attempt, failed or not, yields one ``Sample`` for the sink (``Dispatcher.record``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from gateway.errors import UpstreamError, UpstreamStatusError, UpstreamTimeout, UpstreamUnavailable
from gateway.meter import Clock, Reading, StreamMeter, read_body
from gateway.metrics import Metrics
from gateway.relay.attempt import (
    CLIENT_FAULT_STATUSES,
    Attempt,
    AttemptLog,
    ClientFault,
    describe_error,
    error_of,
    final_error,
    is_request_fault,
    retry_after,
)
from gateway.relay.hedging import race
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest
from gateway.routing import Candidate, NullObserver, RoutePlan, Router, RoutingObserver
from gateway.samples import Outcome, Sample, SampleSink
from gateway.tokens import TokenCounter
from gateway.upstream import MAX_ERROR_BODY, AttemptTimeouts, UpstreamPool


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
            return await race(self, request, plan)
        policy = plan.policy
        deadline = request.received_at + policy.total_timeout_s
        log = AttemptLog(clock=self.clock)
        errors: list[UpstreamError] = []
        for index, candidate in enumerate(plan.candidates):
            remaining = deadline - self.clock()
            if log.attempts >= policy.max_attempts or remaining <= 0:
                break
            attempt = self.admit(request, candidate)
            if attempt is None:
                continue
            if errors:
                self.fallback(request, errors[-1], candidate)
            log.attempts += 1
            attempt.number = log.attempts
            try:
                await self.open(request, plan, attempt, remaining)
            except UpstreamError as exc:
                exc.provider = exc.provider or candidate.provider.name
                errors.append(exc)
                continue
            except ClientFault as fault:
                log.commit(attempt)
                return FullReply(fault.status, fault.body, fault.content_type, log)
            self.commit(request, log, attempt)
            if request.stream:
                return StreamReply(self, request, attempt, log, plan, plan.candidates[index + 1 :])
            return await self._finish_full(request, attempt, log)
        error = final_error(errors, log.attempts, deadline_passed=self.clock() >= deadline)
        error.headers["x-gateway-attempts"] = str(log.attempts)
        raise error

    def admit(self, request: ProxyRequest, candidate: Candidate) -> Attempt | None:
        """Ask the router for a slot; None when the candidate may not be tried now (circuit, capacity)."""
        if not self.router.attempt_started(candidate):
            return None
        self.metrics.attempt_started(candidate.provider.name)
        attempt = Attempt(candidate, sent_at=self.clock(), started_wall=self.wall_clock())
        if request.trace.upstream_sent_at is None:
            request.trace.upstream_sent_at = attempt.sent_at
        return attempt

    def fallback(self, request: ProxyRequest, error: UpstreamError, next_candidate: Candidate) -> None:
        self.metrics.fallback(request.requested_model, error.provider)
        self.observer.fallback(request.requested_model, error.provider, next_candidate.name)

    def commit(self, request: ProxyRequest, log: AttemptLog, attempt: Attempt) -> None:
        log.commit(attempt)
        self.metrics.route_decided(request.requested_model, attempt.candidate.provider.name, log.route)

    async def open(self, request: ProxyRequest, plan: RoutePlan, attempt: Attempt, remaining: float) -> None:
        """Send one attempt and wait until it is safe to commit to it (headers, and first token for streams).

        A failed attempt records its sample and raises ``UpstreamError`` (or ``ClientFault``).
        """
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
            self.fail(request, attempt, "timeout", error)
            raise error from exc
        except UpstreamTimeout as exc:
            self.fail(request, attempt, "timeout", exc)
            raise
        except UpstreamError as exc:
            meter = attempt.meter
            self.fail(
                request, attempt, "broken_stream" if meter and meter.first_error is None else "upstream_error", exc
            )
            raise
        except ClientFault:
            self.fail(request, attempt, "client_error", None)
            raise
        except asyncio.CancelledError:
            self.fail(request, attempt, "client_cancelled", None)
            raise
        if request.trace.upstream_ready_at is None:
            # The committed attempt's; a hedge's loser or a continuation must not move it.
            request.trace.upstream_ready_at = attempt.meter.first_output_at if attempt.meter else self.clock()

    async def _check_status(self, attempt: Attempt, redact: Callable[[bytes], bytes]) -> None:
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
            raise ClientFault(response.status, body, content_type)
        message, code = error_of(body)
        raise UpstreamStatusError(
            f"{provider}: upstream returned {response.status}: {message}",
            provider=provider,
            status=response.status,
            code=code,
            retry_after_s=retry_after(response.headers.get("retry-after"), self.wall_clock()),
        )

    async def _await_first_token(self, attempt: Attempt) -> None:
        """Read (and hold back) chunks until one carries output, ``[DONE]`` comes, or the stream ends.

        An error event before any output is the provider's failure to start (overloaded, an
        internal error): nothing has reached the client, so the next deployment is tried. Only
        an error that blames the request (context length, content filter) is relayed as is.
        """
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
        if meter.first_error is not None and not is_request_fault(meter.first_error):
            name = attempt.candidate.provider.name
            message, code = describe_error(meter.first_error)
            raise UpstreamUnavailable(
                f"{name}: upstream error before the first token: {message}", provider=name, status=200, code=code
            )

    async def _finish_full(self, request: ProxyRequest, attempt: Attempt, log: AttemptLog) -> FullReply:
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

    def fail(self, request: ProxyRequest, attempt: Attempt, outcome: Outcome, error: UpstreamError | None) -> None:
        """Close a failed attempt and record its sample."""
        if attempt.response is not None:
            attempt.response.aclose()
        status = attempt.status if attempt.status is not None else (error.upstream_status if error else None)
        ttft = attempt.meter.ttft_s if attempt.meter else None
        if ttft is None and outcome == "client_cancelled" and attempt.hedged and not attempt.is_hedge:
            # A primary cancelled while hedged had waited past its hedge threshold (about its own
            # p95) without a token. Its wait is recorded as a lower bound: that keeps every
            # quantile below the threshold exact, where dropping it would hide the slow tail.
            ttft = self.clock() - attempt.sent_at
        retry_after_s = error.retry_after_s if error is not None else None
        self.record(request, attempt, outcome, Reading(ttft_s=ttft), status, retry_after_s)

    def abandon(self, request: ProxyRequest, attempt: Attempt) -> None:
        """Drop an attempt that answered but lost the race (both produced a token at once)."""
        if attempt.response is not None:
            attempt.response.aclose()
        self.record(
            request, attempt, "client_cancelled", Reading(ttft_s=attempt.meter.ttft_s if attempt.meter else None)
        )

    def record(
        self,
        request: ProxyRequest,
        attempt: Attempt,
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
