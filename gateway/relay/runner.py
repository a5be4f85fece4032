"""One attempt at one deployment, from admission to its ``Sample``: the layer every attempt loop calls.

The attempt loops (``dispatch.attempt_in_order``, ``hedging.race``, ``recovery.resume``) decide
*which* candidate to try next; ``AttemptRunner`` does the rest, the same way for all of them::

    attempt = runner.start(request, candidate, budget)   # router admits it (circuit, capacity), counted
                                                          # (start_first: the first with room, or wait)
    await runner.open(request, attempt, budget)           # sent; waits for headers, and the first token
                                                          # of a stream; a failure is recorded and raised
    runner.commit(request, budget, attempt)               # the client's answer comes from it
    ...                                                   # the reply relays it, then
    runner.record(request, attempt, outcome, reading)     # its Sample, once

Every admitted attempt ends in exactly one ``record`` (``fail`` and ``abandon`` call it), which
hands the ``Sample`` to the router and the sinks (see ``gateway.samples``) and frees its slot,
waking the oldest request waiting for one (``gateway.relay.queue``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Sequence

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.events import GatewayEvents, NoEvents
from gateway.reading import Reading
from gateway.relay.attempt import Attempt, ClientFault
from gateway.relay.budget import AttemptBudget
from gateway.relay.deadline import Deadline
from gateway.relay.echo import echoes, without_echo
from gateway.relay.first_token import await_first_token, check_whole, note_status, status_error
from gateway.relay.outbound import cured, upstream_body, upstream_of, upstream_path
from gateway.relay.prompt_count import counted_prompt
from gateway.relay.queue import SlotQueue, slot_key
from gateway.relay.refusals import RefusalLog, capacity_refusal, waited_slots
from gateway.relay.request import ProxyRequest
from gateway.relay.verdict import read_whole, verdict
from gateway.routing import Candidate, Router
from gateway.samples import Outcome, Sample, SampleSink, Validity, sample_from_fields
from gateway.sessions.session_bindings import SessionBindings
from gateway.tokens import TokenCounter
from gateway.types import Clock, QueueOutcome
from gateway.upstream import AttemptTimeouts
from gateway.upstream_pool import UpstreamPool


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
        queue: SlotQueue | None = None,
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
        self.rng = random.Random()  # the retries' jitter
        self.queue = queue if queue is not None else SlotQueue(clock)
        self._refusal_log = RefusalLog(clock)

    # -- the lifecycle of one attempt -----------------------------------------------------------

    def start(
        self,
        request: ProxyRequest,
        candidate: Candidate,
        budget: AttemptBudget,
        *,
        as_hedge: bool = False,
        retry: bool = False,
        unseen: bool = False,
    ) -> Attempt | None:
        """Admit an attempt at ``candidate`` and count it; None when the router says not now (circuit, capacity).

        ``retry``: the request asks ``candidate`` again after waiting for it (``gateway.relay.retry``);
        ``unseen``: a shadow probe, never the client's answer (``Attempt.unseen``).
        """
        if not self.router.attempt_started(candidate, retry=retry):
            return None
        self.events.attempt_started(candidate.model, candidate.name, candidate.provider.name)
        attempt = Attempt(candidate, sent_at=self.clock(), started_wall=self.wall_clock())
        attempt.is_hedge = attempt.hedged = as_hedge
        attempt.unseen = unseen
        budget.spend(attempt)
        if request.trace.upstream_sent_at is None and not unseen:
            request.trace.upstream_sent_at = attempt.sent_at
        return attempt

    async def wait_to_retry(self, seconds: float) -> None:
        """Wait before asking a deployment again (its ``Retry-After``, or a back-off): never a tight loop."""
        await asyncio.sleep(seconds)

    async def start_first(
        self,
        request: ProxyRequest,
        candidates: Sequence[Candidate],
        budget: AttemptBudget,
        *,
        as_hedge: bool = False,
        retry: bool = False,
    ) -> tuple[Attempt, tuple[Candidate, ...]] | None:
        """Admit an attempt at the first of ``candidates`` with room, in order; wait for a slot when all are full.

        A full candidate (at its provider's limit, or behind requests already waiting for it) is
        skipped for the next with room, which then serves as ``overflow``. When every candidate
        that may be tried is full, the request waits in its model's line (a hedge does not),
        bounded by the policy's ``queue_timeout_s``, its line's length and the request's
        deadline; past them it is refused with 429 and ``Retry-After``. Returns the attempt and
        the candidates left to fall back on (the full ones skipped first, in order), or None
        when none can be tried (circuits open). ``retry``: the first candidate is asked again after
        waiting for it (a lone deployment's retry passes its open circuit).
        """
        policy = budget.policy
        model = request.requested_model
        wait = not as_hedge
        # A request with a first-token objective waits no longer than that: past it, the wait alone broke it.
        slo = request.ttft_slo_s
        wait_bound = policy.queue_timeout_s if slo is None else min(policy.queue_timeout_s, slo)
        seq: int | None = None
        entered: float | None = None
        while True:
            full: list[Candidate] = []
            for index, candidate in enumerate(candidates):
                if seq is None and self.queue.contended(slot_key((candidate.model, candidate.name))):
                    full.append(candidate)  # others wait for this provider: no slot taken ahead of them
                    continue
                tried = dataclasses.replace(candidate, reason="overflow") if full else candidate
                attempt = self.start(request, tried, budget, as_hedge=as_hedge, retry=retry and index == 0)
                if attempt is not None:
                    if entered is not None:
                        self._left_queue(request, model, entered, "served")
                    return attempt, (*full, *candidates[index + 1 :])
                if self.router.at_capacity(candidate):
                    full.append(candidate)
            if not full or not wait:
                if entered is not None:
                    self._left_queue(request, model, entered, "served")
                return None
            now = self.clock()
            if entered is None:
                if self.queue.depth(model) >= policy.queue_max_length:
                    self.events.queue_left(model, 0.0, "full")
                    refusal = capacity_refusal(
                        self.queue, model, full, "capacity_queue_full", f"{policy.queue_max_length} already wait"
                    )
                    self._refusal_log.log(model, refusal)
                    raise refusal
                entered = now
                self.events.queue_entered(model)
            left = min(entered + wait_bound, budget.deadline) - now
            reopens = self.router.capacity_reopens_in_s()
            try:
                seq = await self.queue.wait(
                    model, waited_slots(full), min(left, reopens) if reopens is not None else left, seq=seq
                )
            except TimeoutError:
                if self.clock() - entered < wait_bound and budget.remaining_s() > 0:
                    continue  # a provider out of budget has reset: look again
                self._left_queue(request, model, entered, "timeout")
                waited = self.clock() - entered
                refusal = capacity_refusal(self.queue, model, full, "capacity_wait_timeout", f"waited {waited:.1f}s")
                self._refusal_log.log(model, refusal)
                raise refusal from None
            except asyncio.CancelledError:
                self._left_queue(request, model, entered, "gone")
                raise

    def _left_queue(self, request: ProxyRequest, model: str, entered: float, outcome: QueueOutcome) -> None:
        waited = self.clock() - entered
        trace = request.trace
        trace.queue_wait_s += waited
        if trace.upstream_sent_at is None or trace.upstream_sent_at >= entered:
            trace.queue_wait_before_sent_s += waited
        self.events.queue_left(model, waited, outcome)

    def fall_back(self, budget: AttemptBudget, candidate: Candidate) -> None:
        """Tell the events that ``candidate`` is tried because the previous attempt failed (if one did)."""
        failed = budget.unfollowed_failure()
        if failed is not None:
            self.events.fallback(candidate.model, failed.name, failed.provider.name, candidate.name)

    async def open(self, request: ProxyRequest, attempt: Attempt, budget: AttemptBudget) -> None:
        """Send one attempt and wait until it is safe to commit to it (headers, and first token for streams); a
        failed attempt records its sample and raises ``UpstreamError`` (or ``ClientFault``)."""
        policy = budget.policy
        candidate = attempt.candidate
        remaining = budget.remaining_s()
        client = self.upstreams[candidate.provider.name]
        first_token_s = min(candidate.first_token_timeout_s or policy.first_token_timeout_s, remaining)
        read_s = policy.idle_timeout_s
        if request.stream and candidate.idle_timeout_s is not None:
            # A learned gap, but never shorter than the first-token deadline: a provider that sends its
            # headers with its first token is silent until then, and that wait is the other deadline's.
            read_s = max(candidate.idle_timeout_s, first_token_s)
        timeouts = AttemptTimeouts(connect_s=policy.connect_timeout_s, read_s=read_s, total_s=remaining)
        api = upstream_of(request, candidate)  # once per attempt: the body, the path and the stream's reader
        body = upstream_body(request, candidate, api, client)
        path = upstream_path(request, api)
        try:
            if request.stream:
                with Deadline(first_token_s):  # ``asyncio.timeout``'s rules, without its two coroutines
                    attempt.response = await client.send(path, body, timeouts, request.headers, api)
                    if note_status(attempt, self.wall_clock):
                        await status_error(attempt, client.redact, self.wall_clock)
                    await await_first_token(request, attempt, self.clock, api, client.redact, self.events)
                if attempt.meter is not None:
                    self.router.attempt_streaming(candidate, attempt.meter)
            else:
                attempt.response = await client.send(path, body, timeouts, request.headers, api)
                if note_status(attempt, self.wall_clock):
                    await status_error(attempt, client.redact, self.wall_clock)
                attempt.body = client.redact(await attempt.response.read_all())
                attempt.response.close()  # read to the end: the connection goes back to the pool
                check_whole(attempt)
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
        except ClientFault as fault:
            if cured(request, fault, client, api):  # learned: sent again at once, and from now on, as needed
                return await self.open(request, attempt, budget)
            self.fail(request, attempt, "client_error", None)
            raise
        except asyncio.CancelledError:
            self.fail(request, attempt, "client_cancelled", None)
            raise
        if request.trace.upstream_ready_at is None and not attempt.unseen:
            # The committed attempt's; a hedge's loser, a shadow or a continuation must not move it.
            request.trace.upstream_ready_at = attempt.meter.first_output_at if attempt.meter else self.clock()

    def commit(self, request: ProxyRequest, budget: AttemptBudget, attempt: Attempt) -> None:
        """The client's answer comes from ``attempt``: note it, and why it was the one."""
        budget.log.commit(attempt)
        candidate = attempt.candidate
        self.events.committed(request.requested_model, candidate.name, candidate.provider.name, budget.log.route)

    def commit_refusal(self, budget: AttemptBudget, attempt: Attempt) -> None:
        """The client's answer is ``attempt``'s own 4xx, relayed as is (``ClientFault``): note it as the answer.

        Its sample is already recorded (``open`` recorded it as a client error); no route is counted for it.
        """
        budget.log.commit(attempt)

    def recommit(self, budget: AttemptBudget, attempt: Attempt) -> None:
        """``attempt``, committed before, is the client's answer again: an invalid whole answer that no retry
        bettered (``dispatch.retry_invalid``). Its route was counted when it was first committed."""
        budget.log.commit(attempt)

    def finish_full(self, request: ProxyRequest, attempt: Attempt) -> None:
        """Measure and record a whole (non-streamed) answer; called once it has gone to the client (or, when it
        is retried as invalid, once another deployment is asked instead)."""
        reading, outcome = self.read_whole(request, attempt)
        self.record(request, attempt, outcome, reading)

    def full_validity(self, request: ProxyRequest, attempt: Attempt) -> Validity | None:
        """The verdict ``finish_full`` will record for a whole answer (None: not judged), before it is sent."""
        reading, outcome = self.read_whole(request, attempt)
        return verdict(request, outcome, reading)

    def read_whole(self, request: ProxyRequest, attempt: Attempt) -> tuple[Reading, Outcome]:
        """A whole answer's reading and outcome, read once per attempt (its body does not change once read)."""
        if attempt.whole is None:
            attempt.whole = read_whole(request, attempt, self.counter)
        return attempt.whole

    def fail(self, request: ProxyRequest, attempt: Attempt, outcome: Outcome, error: UpstreamError | None) -> None:
        """Close a failed attempt and record its sample, the error's status first (a 200's refusal: its 401)."""
        if attempt.response is not None:
            attempt.response.close()
        status = error.upstream_status if error is not None and error.upstream_status is not None else attempt.status
        ttft = attempt.meter.ttft_s if attempt.meter else None
        if ttft is None and outcome == "client_cancelled" and attempt.hedged and not attempt.is_hedge:
            # A primary cancelled while hedged had waited past its hedge threshold (about its own
            # p95) without a token. Its wait is recorded as a lower bound: that keeps every
            # quantile below the threshold exact, where dropping it would hide the slow tail.
            ttft = self.clock() - attempt.sent_at
        self.record(request, attempt, outcome, Reading(ttft_s=ttft), status, error)
        if error is not None and error.retry_after_s is None and status == 429:
            # The provider named no wait: the client's Retry-After is the cool-down the router just chose.
            error.cooldown_s = self.router.cooldown_s(attempt.candidate)

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
        error: UpstreamError | None = None,
    ) -> Sample:
        """Turn an ended attempt into its ``Sample``: to the router (health, in flight, ``error``) and the sinks."""
        attempt.recorded = True
        if reading.output_tokens and echoes(request.endpoint, request.body):
            reading = without_echo(reading, request.body, self.counter, attempt.echo, attempt.body)
        candidate = attempt.candidate
        deployment = candidate.deployment
        prompt = reading.usage_prompt_tokens if reading.usage_prompt_tokens is not None else request.prompt_tokens
        completion = reading.usage_completion_tokens
        output = completion if completion is not None else reading.output_tokens
        cost = None
        # A hedge's loser was still billed for its prompt once the provider had started on it.
        if outcome == "ok" or output or (attempt.hedged and attempt.status is not None and attempt.status < 400):
            if reading.usage_prompt_tokens is None:
                prompt = counted_prompt(request, self.counter)
            cost = deployment.cost_usd(prompt, output or 0, reading.usage_cached_tokens or 0)
        expects = request.expects
        validity = verdict(request, outcome, reading)
        sample = sample_from_fields(
            request.requested_model,  # model
            deployment.name,  # deployment
            candidate.provider.name,  # provider
            request.endpoint,  # endpoint
            request.stream,  # stream
            outcome,  # outcome
            attempt.started_wall,  # started_at
            status if status is not None else attempt.status,  # status
            reading.ttft_s,  # ttft_s
            reading.first_answer_s,  # first_answer_s
            reading.tokens_per_s,  # tokens_per_s
            self.clock() - request.received_at,  # e2e_s
            reading.output_tokens,  # output_tokens
            reading.usage_prompt_tokens,  # usage_prompt_tokens
            reading.usage_completion_tokens,  # usage_completion_tokens
            reading.usage_cached_tokens,  # usage_cached_tokens
            request.prompt_tokens,  # prompt_tokens_estimate
            cost,  # cost_usd
            attempt.hedged,  # hedged
            self.clock() - attempt.sent_at,  # attempt_s
            reading.chunk_gaps_s,  # chunk_gaps_s
            expects.kind if expects.judged else None,  # kind
            validity,  # validity
        )
        retry_after_s, reason = (error.retry_after_s, error.message) if error is not None else (None, None)
        self.router.attempt_finished(candidate, sample, retry_after_s, attempt.rate_limits, reason=reason)
        self.events.attempt_ended(candidate.model, candidate.name, candidate.provider.name)
        self.queue.released(slot_key((candidate.model, candidate.name)), candidate.provider.name)
        request.trace.samples.append(sample)
        if outcome == "ok":
            self._cached(request, candidate, prompt, output or 0, reading.usage_cached_tokens, cost)
            request.trace.answer_text = reading.answer_text
        if reading.thought_signed:  # native or translated: this deployment wants its signatures back
            self.upstreams[candidate.provider.name].thought_signers.add(deployment.model)
        if reading.provider_timings is not None:
            request.trace.provider_timings = reading.provider_timings
        if not request.probe:
            self.sink.record(sample)  # a probe's one token says nothing of speed, and costs no client
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
