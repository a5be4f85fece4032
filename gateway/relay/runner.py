"""One attempt at one deployment, from admission to its ``Sample``: the layer every attempt loop calls.

The attempt loops (``dispatch.attempt_in_order``, ``hedging.race``, ``recovery.resume``) decide
*which* candidate to try next; ``AttemptRunner`` does the rest, the same way for all of them::

    attempt = runner.start(request, candidate, budget)   # router admits it (circuit, capacity), counted
    await runner.open(request, attempt, budget)           # sent; waits for headers, and the first token
                                                          # of a stream; a failure is recorded and raised
    runner.commit(request, budget, attempt)               # the client's answer comes from it
    ...                                                   # the reply relays it, then
    runner.record(request, attempt, outcome, reading)     # its Sample, once

Every admitted attempt ends in exactly one ``record`` (``fail`` and ``abandon`` call it), which
hands the ``Sample`` to the router and the sinks (see ``gateway.samples``) and frees its slot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from gateway.errors import (
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
    describe_error,
    describe_error_body,
)
from gateway.events import GatewayEvents, NoEvents
from gateway.meter import Reading, StreamMeter, read_full_reply
from gateway.relay.attempt import CLIENT_FAULT_STATUSES, Attempt, ClientFault, is_request_fault, retry_after
from gateway.relay.budget import AttemptBudget
from gateway.relay.outbound import upstream_body
from gateway.relay.request import ProxyRequest
from gateway.routing import Candidate, Router
from gateway.samples import Outcome, Sample, SampleSink
from gateway.session_bindings import SessionBindings
from gateway.tokens import TokenCounter
from gateway.types import Clock
from gateway.upstream import MAX_ERROR_BODY, AttemptTimeouts, UpstreamPool


class AttemptRunner:
    """Runs single attempts for every request. One per runtime; holds no per-request state."""

    def __init__(
        self,
        upstreams: UpstreamPool,
        router: Router,
        sink: SampleSink,
        counter: TokenCounter,
        *,
        events: GatewayEvents | None = None,
        clock: Clock = time.perf_counter,
        wall_clock: Clock = time.time,
        sessions: SessionBindings | None = None,
    ) -> None:
        self.sessions = sessions if sessions is not None else SessionBindings()
        self.upstreams = upstreams
        self.router = router
        self.sink = sink
        self.counter = counter
        self.events: GatewayEvents = events if events is not None else NoEvents()
        self.clock = clock
        self.wall_clock = wall_clock

    # -- the lifecycle of one attempt -----------------------------------------------------------

    def start(
        self, request: ProxyRequest, candidate: Candidate, budget: AttemptBudget, *, as_hedge: bool = False
    ) -> Attempt | None:
        """Admit an attempt at ``candidate`` and count it; None when the router says not now (circuit, capacity)."""
        if not self.router.attempt_started(candidate):
            return None
        self.events.attempt_started(candidate.model, candidate.name, candidate.provider.name)
        attempt = Attempt(candidate, sent_at=self.clock(), started_wall=self.wall_clock())
        attempt.is_hedge = attempt.hedged = as_hedge
        budget.spend(attempt)
        if request.trace.upstream_sent_at is None:
            request.trace.upstream_sent_at = attempt.sent_at
        return attempt

    def fall_back(self, budget: AttemptBudget, candidate: Candidate) -> None:
        """Tell the events that ``candidate`` is tried because the previous attempt failed (if one did)."""
        failed = budget.unfollowed_failure()
        if failed is not None:
            self.events.fallback(candidate.model, failed.name, failed.provider.name, candidate.name)

    async def open(self, request: ProxyRequest, attempt: Attempt, budget: AttemptBudget) -> None:
        """Send one attempt and wait until it is safe to commit to it (headers, and first token for streams).

        A failed attempt records its sample and raises ``UpstreamError`` (or ``ClientFault``).
        """
        policy = budget.policy
        candidate = attempt.candidate
        remaining = budget.remaining_s()
        client = self.upstreams[candidate.provider.name]
        timeouts = AttemptTimeouts(connect_s=policy.connect_timeout_s, read_s=policy.idle_timeout_s, total_s=remaining)
        body = upstream_body(request, candidate)
        api = request.endpoint
        first_token_s = min(policy.first_token_timeout_s, remaining)
        try:
            if request.stream:
                async with asyncio.timeout(first_token_s):
                    attempt.response = await client.send(request.path, body, timeouts, request.headers, api)
                    await self._check_status(attempt, client.redact)
                    await self._await_first_token(request, attempt)
            else:
                attempt.response = await client.send(request.path, body, timeouts, request.headers, api)
                await self._check_status(attempt, client.redact)
                attempt.body = client.redact(await attempt.response.read_all())
                attempt.response.close()  # read to the end: the connection goes back to the pool
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
            outcome: Outcome = "broken_stream" if meter and meter.first_error is None else "upstream_error"
            self.fail(request, attempt, outcome, exc)
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

    def commit(self, request: ProxyRequest, budget: AttemptBudget, attempt: Attempt) -> None:
        """The client's answer comes from ``attempt``: note it, and why it was the one."""
        budget.log.commit(attempt)
        candidate = attempt.candidate
        self.events.committed(request.requested_model, candidate.name, candidate.provider.name, budget.log.route)

    def finish_full(self, request: ProxyRequest, attempt: Attempt) -> None:
        """Measure and record a whole (non-streamed) answer; called once it has gone to the client."""
        reading = read_full_reply(attempt.body, self.counter, request.dialect)
        if request.endpoint == "embeddings":
            # Embeddings are measured by latency only: there are no output tokens to count.
            reading = dataclasses.replace(reading, output_tokens=None, answer_text="")
        outcome: Outcome = "upstream_error" if reading.error_message or reading.malformed else "ok"
        if outcome == "ok" and reading.incomplete:
            outcome = "client_error"  # cut short by the request's own limit or filter: not a clean answer
        self.record(request, attempt, outcome, reading)

    def fail(self, request: ProxyRequest, attempt: Attempt, outcome: Outcome, error: UpstreamError | None) -> None:
        """Close a failed attempt and record its sample."""
        if attempt.response is not None:
            attempt.response.close()
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
            attempt.response.close()
        ttft = attempt.meter.ttft_s if attempt.meter else None
        self.record(request, attempt, "client_cancelled", Reading(ttft_s=ttft))

    def record(
        self,
        request: ProxyRequest,
        attempt: Attempt,
        outcome: Outcome,
        reading: Reading,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> Sample:
        """Turn an ended attempt into its ``Sample``: to the router (health, in flight) and the sinks."""
        candidate = attempt.candidate
        deployment = candidate.deployment
        prompt = reading.usage_prompt_tokens if reading.usage_prompt_tokens is not None else request.prompt_tokens
        output = reading.usage_completion_tokens
        if output is None:
            output = reading.output_tokens
        cost = None
        # A hedge's loser was still billed for its prompt once the provider had started on it.
        if outcome == "ok" or output or (attempt.hedged and attempt.status is not None and attempt.status < 400):
            cost = deployment.cost_usd(prompt, output or 0, reading.usage_cached_tokens or 0)
        sample = Sample(
            model=request.requested_model,
            deployment=deployment.name,
            provider=candidate.provider.name,
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
            usage_cached_tokens=reading.usage_cached_tokens,
            prompt_tokens_estimate=request.prompt_tokens,
            cost_usd=cost,
            hedged=attempt.hedged,
            attempt_s=self.clock() - attempt.sent_at,
            chunk_gaps_s=reading.chunk_gaps_s,
        )
        self.router.attempt_finished(candidate, sample, retry_after_s)
        self.events.attempt_ended(candidate.model, candidate.name, candidate.provider.name)
        if outcome == "ok":
            self._cached(request, candidate, prompt, output or 0, reading.usage_cached_tokens, cost)
        request.trace.samples.append(sample)
        if outcome == "ok":
            request.trace.answer_text = reading.answer_text
        if reading.provider_timings is not None:
            request.trace.provider_timings = reading.provider_timings
        self.sink.record(sample)
        return sample

    def _cached(
        self,
        request: ProxyRequest,
        candidate: Candidate,
        prompt: int,
        output: int,
        cached: int | None,
        cost: float | None,
    ) -> None:
        """A complete answer: its session is bound where it came from (the prompt is cached there now), and what
        the provider's cache served of it is counted with what it saved."""
        if request.session_key is not None:
            self.sessions.bind(request.session_key, candidate.name, prompt, request.session_ttl_s)
            self.events.session_bound(candidate.model, candidate.name)
        if cached:
            full = candidate.deployment.cost_usd(prompt, output)
            speed = candidate.prefill_tokens_per_s
            saved_s = cached / speed if speed else 0.0
            self.events.cache_used(candidate.model, candidate.name, cached, full - (cost or full), saved_s)

    # -- waiting for an attempt to be safe to commit to -----------------------------------------

    async def _check_status(self, attempt: Attempt, redact: Callable[[bytes], bytes]) -> None:
        response = attempt.response
        assert response is not None
        attempt.status = response.status
        if response.status < 400:
            return
        provider = attempt.candidate.provider.name
        body = redact(await response.read_all(MAX_ERROR_BODY))
        response.close()
        content_type = response.headers.get("content-type", "application/json")
        if response.status in CLIENT_FAULT_STATUSES:
            raise ClientFault(response.status, body, content_type)
        message, code = describe_error_body(body)
        raise UpstreamStatusError(
            f"{provider}: upstream returned {response.status}: {message}",
            provider=provider,
            status=response.status,
            code=code,
            retry_after_s=retry_after(response.headers.get("retry-after"), self.wall_clock()),
        )

    async def _await_first_token(self, request: ProxyRequest, attempt: Attempt) -> None:
        """Read (and hold back) chunks until one carries output, ``[DONE]`` comes, or the stream ends.

        An error event before any output is the provider's failure to start (overloaded, an
        internal error): nothing has reached the client, so the next deployment is tried. Only
        an error that blames the request (context length, content filter) is relayed as is.
        """
        response = attempt.response
        assert response is not None
        meter = attempt.meter = StreamMeter(self.clock, attempt.sent_at, request.dialect)
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
