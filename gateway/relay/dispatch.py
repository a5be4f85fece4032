"""From a ``RoutePlan`` to a committed ``Reply``: the request's attempt loop, in order or hedged.

Before any byte has reached the client, a failed attempt (connect error, 5xx, 429, first-token
timeout, a stream that breaks or errs before its first token) moves on to the next candidate, or
asks the same one again after a wait when that is predicted to be faster (``retry``), within the
policy's attempt count and total deadline (the request's ``AttemptBudget``). An
upstream 4xx that is the request's own fault (400, 413, 422: content filter, bad parameters) is
relayed as is; a context length exceeded moves on to a deployment with a larger window while
one is left, and input a deployment does not accept (images) to another (``context``). Streams
whose first candidate carries a hedge threshold go through ``hedging.race`` instead of
``attempt_in_order``; both hand back an ``Opened`` attempt, and the dispatcher wraps it in the
reply that writes it to the client.

Layers, each calling only the one below: ``Dispatcher.dispatch`` → ``attempt_in_order`` /
``hedging.race`` → ``AttemptRunner`` (one attempt) → ``UpstreamClient``. After the first byte,
``StreamReply`` → ``recovery.resume`` → ``AttemptRunner`` finishes a broken stream elsewhere.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging

from gateway.dialects.messages import anthropic_error, is_anthropic_error, named
from gateway.errors import GatewayError, UpstreamError, describe_error_body
from gateway.relay.attempt import Attempt, ClientFault, Opened
from gateway.relay.budget import AttemptBudget
from gateway.relay.context import (
    CONTEXT_CODES,
    CONTEXT_EXCEEDED,
    as_prompt_too_long,
    context_exceeded,
    may_serve,
    refused_here,
)
from gateway.relay.drain import Drains
from gateway.relay.first_token import json_object_like
from gateway.relay.hedging import race
from gateway.relay.outbound import upstream_of
from gateway.relay.prompt_count import CountedUsage
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest
from gateway.relay.retry import Retries
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate, RoutePlan
from gateway.sessions.response_owners import Owner, ResponseOwners
from gateway.translate import as_api, translate_error, translate_reply
from gateway.types import Clock

logger = logging.getLogger("gateway")


class Dispatcher:
    """Runs the attempts of requests. One per runtime; holds no per-request state.

    ``owners`` hears which deployment created each Responses answer (bound before its first byte
    reaches the client, so that the client's next call can find it).
    """

    def __init__(
        self, runner: AttemptRunner, owners: ResponseOwners | None = None, *, providers_keep_responses: bool = True
    ) -> None:
        self.runner = runner
        self.owners = owners if owners is not None else ResponseOwners()
        self.providers_keep_responses = providers_keep_responses
        """``[responses] state = "provider"``: a native deployment's stored answer is bound to it (else the
        gateway keeps the conversation, ``gateway.conversation_flow``, and nothing is bound)."""
        self.drains = Drains(runner)
        """Race losers still being read for their streams (``gateway.relay.drain``)."""

    async def aclose(self) -> None:
        """Stop the drains still reading: the upstream connections close next."""
        await self.drains.aclose()

    @property
    def clock(self) -> Clock:
        return self.runner.clock

    async def dispatch(self, request: ProxyRequest, plan: RoutePlan) -> Reply:
        """Try the plan's candidates until one answers; raise the right ``GatewayError`` if none does."""
        runner = self.runner
        budget = AttemptBudget.for_request(plan.policy, request.received_at, runner.clock, request.timeout_s)
        if plan.shadow is not None and request.stream:
            self.drains.shadow(request, plan.shadow, plan.policy)
        remaining = plan
        while True:
            candidates = remaining.candidates
            hedged = request.stream and bool(candidates) and candidates[0].hedge_after_s is not None
            try:
                if hedged:
                    opened = await race(runner, budget, request, remaining, self.drains)
                else:
                    opened = await attempt_in_order(runner, budget, request, remaining)
                break
            except ClientFault as fault:
                others = self._others(fault, budget, plan)
                if not others or not budget.allows_another():
                    return _fault_reply(request, fault, budget)
                remaining = dataclasses.replace(plan, candidates=others)
            except GatewayError as error:
                _log_unanswered(request, plan, budget, error)
                raise
        if (
            request.endpoint == "responses"  # first: a chat request needs no look at the upstream's API
            and self.providers_keep_responses
            and upstream_of(request, opened.attempt.candidate) == "responses"
            and request.body.get("store") is not False
        ):
            # A response created with ``store: false`` (every Codex call) is kept nowhere upstream: its id
            # can never be continued or fetched, so binding it would only fill the store (and evict). One
            # by translation (its id is the gateway's own; or any, under state = "gateway") is kept by the
            # gateway (``conversation_flow``).
            self._bind(request, opened.attempt)
        if request.stream:
            return StreamReply(runner, budget, request, opened.attempt, opened.spare)
        attempt = opened.attempt
        if plan.policy.retry_invalid:
            attempt = await retry_invalid(runner, budget, request, plan, opened)
        response = attempt.response
        assert response is not None
        content_type = response.headers.get("content-type", "application/json")
        status = 200 if attempt.status is None else attempt.status
        finish = None if attempt.recorded else functools.partial(runner.finish_full, request, attempt)
        upstream = upstream_of(request, attempt.candidate)
        shown = request.shown_model
        if upstream == request.endpoint:
            return FullReply(
                status, named(attempt.body, shown) if shown else attempt.body, content_type, budget.log, finish
            )
        # Reached by translation: the client reads its own API's body; the meter reads the upstream's.
        count = CountedUsage(request, runner.counter, lambda: runner.read_whole(request, attempt)[0].output_tokens)
        body, readable = translate_reply(
            attempt.body,
            as_api(upstream),
            as_api(request.endpoint),
            request.body,
            shown or request.requested_model,
            count,
        )
        return FullReply(status if readable else 502, body, "application/json", budget.log, finish, count.used)

    def _others(self, fault: ClientFault, budget: AttemptBudget, plan: RoutePlan) -> tuple[Candidate, ...]:
        """After a refusal of one deployment's own (a ``context_length_exceeded``, input it does not accept), the
        plan's candidates that may serve the request (``context``)."""
        failed = budget.log.winner
        if failed is None:
            return ()
        exceeded, limit = refused_here(self.runner.router, budget, failed, fault)
        if not exceeded:
            return ()
        tried = {*budget.refused_here, *(c.name for c in budget.failed_at)}
        return may_serve(self.runner.router, failed, fault, limit, plan.candidates, tried)

    def _bind(self, request: ProxyRequest, attempt: Attempt) -> None:
        """Remember which deployment holds this response (its id from ``response.created``, or the body)."""
        response_id = attempt.meter.response_id if attempt.meter is not None else None
        if response_id is None and attempt.body:
            try:
                body = json.loads(attempt.body)
            except ValueError:
                body = None
            if isinstance(body, dict) and isinstance(body.get("id"), str):
                response_id = body["id"]
        if response_id:
            self.owners.remember(response_id, Owner(request.requested_model, attempt.candidate.name))


def _log_unanswered(request: ProxyRequest, plan: RoutePlan, budget: AttemptBudget, error: GatewayError) -> None:
    """One line for a request that failed before its first byte: what it tried, and what was left to ask.

    The plan holds the deployments the router offered (one whose circuit is open is left out of it), so a
    reader can tell "the rest were out of the plan" from "the attempts ran out" or "the deadline passed".
    """
    failed = {c.name for c in budget.failed_at}
    logger.warning(
        "request %s: no deployment answered before the first byte (HTTP %d; attempts %d of %d%s; the plan: %s; "
        "left to ask: %s; the attempts: %s)",
        request.request_id,
        error.status_code,
        budget.used,
        budget.policy.max_attempts + budget.extra,
        ", deadline passed" if budget.remaining_s() <= 0 else "",
        ", ".join(c.name for c in plan.candidates) or "none",
        ", ".join(c.name for c in plan.candidates if c.name not in failed) or "none",
        "; ".join(e.message for e in budget.errors) or "none",
    )


def _fault_reply(request: ProxyRequest, fault: ClientFault, budget: AttemptBudget) -> FullReply:
    """An upstream's 4xx that is the request's fault, relayed: in the client's API shape if it came translated, is
    no JSON (a proxy's HTML page, such as nginx's 413 in front of a provider, where an SDK finds no error), or is
    a Messages server's error in OpenAI's shape (llama.cpp's)."""
    winner = budget.log.winner
    upstream = upstream_of(request, winner) if winner is not None else request.endpoint
    too_long = context_exceeded(fault)[0]
    if request.endpoint == "messages" and too_long:
        # Claude Code compacts its conversation on Anthropic's wording of it, and on no other.
        message = as_prompt_too_long(describe_error_body(fault.body)[0], request.prompt_tokens)
        return FullReply(fault.status, anthropic_error(fault.status, message), "application/json", budget.log)
    if upstream == request.endpoint and json_object_like(fault.body) and _in_client_shape(request, fault, too_long):
        return FullReply(fault.status, fault.body, fault.content_type, budget.log)
    # Codex knows its context window is full by the code (Anthropic's "prompt is too long" has none).
    code = CONTEXT_EXCEEDED if too_long else None
    body = translate_error(fault.body, fault.status, as_api(request.endpoint), code)
    return FullReply(fault.status, body, "application/json", budget.log)


def _in_client_shape(request: ProxyRequest, fault: ClientFault, too_long: bool) -> bool:
    """Whether a native upstream's error body can reach the client as it is: on the Messages API, one in
    Anthropic's shape; on the others, any but a prompt too long without OpenAI's code for it (llama.cpp's
    ``exceed_context_size_error``, vLLM's ``"code": 400``), by which Codex knows its context is full."""
    if request.endpoint == "messages":
        return is_anthropic_error(fault.body)
    return not too_long or describe_error_body(fault.body)[1] in CONTEXT_CODES


async def retry_invalid(
    runner: AttemptRunner, budget: AttemptBudget, request: ProxyRequest, plan: RoutePlan, opened: Opened
) -> Attempt:
    """A whole answer judged invalid, retried on the plan's next candidates within the attempt budget (the
    policy's ``retry_invalid``). The invalid answer is recorded with its verdict as it is left; the client gets
    the first valid answer, or the last answer there was when no other came (never none; already recorded
    then)."""
    attempt, untried = opened.attempt, opened.spare
    while untried and budget.allows_another():
        if runner.full_validity(request, attempt) in (None, "valid"):
            break
        runner.finish_full(request, attempt)
        try:
            retried = await attempt_in_order(runner, budget, request, dataclasses.replace(plan, candidates=untried))
        except (GatewayError, ClientFault):
            runner.recommit(budget, attempt)  # nobody else answered: the invalid answer is the client's after all
            break
        attempt, untried = retried.attempt, retried.spare
    return attempt


async def attempt_in_order(
    runner: AttemptRunner, budget: AttemptBudget, request: ProxyRequest, plan: RoutePlan
) -> Opened:
    """The plan's candidates one after another, until one can be committed to.

    Each attempt goes to the first candidate with room (``AttemptRunner.start_first``: a full one
    is overflowed, and when all are full the request waits for a slot). A failure safe to repeat
    may ask the same candidate again first, when the wait is predicted to pay
    (``gateway.relay.retry``). Raises ``ClientFault`` (the attempt committed, its error to be
    relayed) or the budget's final ``GatewayError`` when no attempt answered.
    """
    candidates: tuple[Candidate, ...] = plan.candidates
    lone = len(candidates) == 1
    again: Candidate | None = None  # the candidate that just failed, to be asked again
    retries: Retries | None = None  # made at the first failure: most requests' first attempt answers
    while budget.allows_another():
        if again is not None:
            # A lone deployment's retry passes its open circuit (a 429 opens it at once) and waits for
            # a slot: waiting was its only choice. Another's retry is skipped when it cannot start now.
            started = await runner.start_first(request, (again,), budget, retry=True) if lone else None
            attempt = started[0] if started is not None else runner.start(request, again, budget)
            again = None
            if attempt is None:
                continue
        else:
            if not candidates:
                break
            started = await runner.start_first(request, candidates, budget)
            if started is None:
                break
            attempt, candidates = started
        candidate = attempt.candidate
        runner.fall_back(budget, candidate)
        try:
            await runner.open(request, attempt, budget)
        except UpstreamError as exc:
            budget.failed(exc, candidate)
            if retries is None:
                retries = Retries()
            if await retries.ask_again(runner, budget, candidate, exc, candidates, lone):
                again = candidate
            continue
        except ClientFault:
            runner.commit_refusal(budget, attempt)
            raise
        runner.commit(request, budget, attempt)
        return Opened(attempt, candidates)
    raise budget.exhausted()
