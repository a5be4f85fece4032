"""From a ``RoutePlan`` to a committed ``Reply``: the request's attempt loop, in order or hedged.

Before any byte has reached the client, a failed attempt (connect error, 5xx, 429, first-token
timeout, a stream that breaks or errs before its first token) moves on to the next candidate,
within the policy's attempt count and total deadline (the request's ``AttemptBudget``). An
upstream 4xx that is the request's own fault (400, 413, 422: context length, content filter, bad
parameters) is relayed as is. Streams whose first candidate carries a hedge threshold go through
``hedging.race`` instead of ``attempt_in_order``; both hand back an ``Opened`` attempt, and the
dispatcher wraps it in the reply that writes it to the client.

Layers, each calling only the one below: ``Dispatcher.dispatch`` → ``attempt_in_order`` /
``hedging.race`` → ``AttemptRunner`` (one attempt) → ``UpstreamClient``. After the first byte,
``StreamReply`` → ``recovery.resume`` → ``AttemptRunner`` finishes a broken stream elsewhere.
"""

from __future__ import annotations

import functools
import json

from gateway.errors import UpstreamError
from gateway.relay.attempt import Attempt, ClientFault, Opened
from gateway.relay.budget import AttemptBudget
from gateway.relay.hedging import race
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest
from gateway.relay.runner import AttemptRunner
from gateway.response_owners import Owner, ResponseOwners
from gateway.routing import Candidate, RoutePlan
from gateway.types import Clock


class Dispatcher:
    """Runs the attempts of requests. One per runtime; holds no per-request state.

    ``owners`` hears which deployment created each Responses answer (bound before its first byte
    reaches the client, so that the client's next call can find it).
    """

    def __init__(self, runner: AttemptRunner, owners: ResponseOwners | None = None) -> None:
        self.runner = runner
        self.owners = owners if owners is not None else ResponseOwners()

    @property
    def clock(self) -> Clock:
        return self.runner.clock

    async def dispatch(self, request: ProxyRequest, plan: RoutePlan) -> Reply:
        """Try the plan's candidates until one answers; raise the right ``GatewayError`` if none does."""
        runner = self.runner
        budget = AttemptBudget.for_request(plan.policy, request.received_at, runner.clock, request.timeout_s)
        hedged = request.stream and bool(plan.candidates) and plan.candidates[0].hedge_after_s is not None
        try:
            if hedged:
                opened = await race(runner, budget, request, plan)
            else:
                opened = await attempt_in_order(runner, budget, request, plan)
        except ClientFault as fault:
            return FullReply(fault.status, fault.body, fault.content_type, budget.log)
        if request.endpoint == "responses":
            self._bind(request, opened.attempt)
        if request.stream:
            return StreamReply(runner, budget, request, opened.attempt, opened.untried)
        attempt = opened.attempt
        response = attempt.response
        assert response is not None
        content_type = response.headers.get("content-type", "application/json")
        status = 200 if attempt.status is None else attempt.status
        finish = functools.partial(runner.finish_full, request, attempt)
        return FullReply(status, attempt.body, content_type, budget.log, finish)

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


async def attempt_in_order(
    runner: AttemptRunner, budget: AttemptBudget, request: ProxyRequest, plan: RoutePlan
) -> Opened:
    """The plan's candidates one after another, until one can be committed to (a full one skipped for
    the next with room, or waited for when all are: ``AttemptRunner.start_first``).

    Raises ``ClientFault`` (the attempt committed, its error to be relayed) or the budget's
    final ``GatewayError`` when no attempt answered.
    """
    candidates: tuple[Candidate, ...] = plan.candidates
    while candidates and budget.allows_another():
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
            continue
        except ClientFault:
            budget.log.commit(attempt)
            raise
        runner.commit(request, budget, attempt)
        return Opened(attempt, candidates)
    raise budget.exhausted()
