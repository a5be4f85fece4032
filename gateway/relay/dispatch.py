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

from gateway.errors import UpstreamError
from gateway.relay.attempt import ClientFault, Opened
from gateway.relay.budget import AttemptBudget
from gateway.relay.hedging import race
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest
from gateway.relay.runner import AttemptRunner
from gateway.routing import RoutePlan
from gateway.types import Clock


class Dispatcher:
    """Runs the attempts of requests. One per runtime; holds no per-request state."""

    def __init__(self, runner: AttemptRunner) -> None:
        self.runner = runner

    @property
    def clock(self) -> Clock:
        return self.runner.clock

    async def dispatch(self, request: ProxyRequest, plan: RoutePlan) -> Reply:
        """Try the plan's candidates until one answers; raise the right ``GatewayError`` if none does."""
        runner = self.runner
        budget = AttemptBudget.for_request(plan.policy, request.received_at, runner.clock)
        hedged = request.stream and bool(plan.candidates) and plan.candidates[0].hedge_after_s is not None
        try:
            if hedged:
                opened = await race(runner, budget, request, plan)
            else:
                opened = await attempt_in_order(runner, budget, request, plan)
        except ClientFault as fault:
            return FullReply(fault.status, fault.body, fault.content_type, budget.log)
        if request.stream:
            return StreamReply(runner, budget, request, opened.attempt, opened.untried)
        attempt = opened.attempt
        response = attempt.response
        assert response is not None
        content_type = response.headers.get("content-type", "application/json")
        status = 200 if attempt.status is None else attempt.status
        finish = functools.partial(runner.finish_full, request, attempt)
        return FullReply(status, attempt.body, content_type, budget.log, finish)


async def attempt_in_order(
    runner: AttemptRunner, budget: AttemptBudget, request: ProxyRequest, plan: RoutePlan
) -> Opened:
    """The plan's candidates one after another, until one can be committed to.

    Raises ``ClientFault`` (the attempt committed, its error to be relayed) or the budget's
    final ``GatewayError`` when no attempt answered.
    """
    for index, candidate in enumerate(plan.candidates):
        if not budget.allows_another():
            break
        attempt = runner.start(request, candidate, budget)
        if attempt is None:
            continue
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
        return Opened(attempt, plan.candidates[index + 1 :])
    raise budget.exhausted()
