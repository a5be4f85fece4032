"""Hedged streams: attempts run as tasks, and the first to produce a token wins.

When the primary's first token is later than its ``hedge_after_s`` (and the model's hedge
budget allows), the next candidate starts beside it. Whichever produces a token first is
committed; the other is cancelled, which closes its upstream connection and records its
sample (``hedged=True``, its prompt's cost counted). A failure of either leaves the other
running; when both have failed, plain fallback goes on.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gateway.errors import UpstreamError
from gateway.relay.attempt import Attempt, AttemptLog, ClientFault, final_error, first_output_at
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest
from gateway.routing import RoutePlan

if TYPE_CHECKING:
    from gateway.relay.dispatch import Dispatcher


async def race(dispatcher: Dispatcher, request: ProxyRequest, plan: RoutePlan) -> Reply:
    """The attempt loop with hedging; raises the right ``GatewayError`` if no attempt answers."""
    policy = plan.policy
    model = plan.candidates[0].model
    deadline = request.received_at + policy.total_timeout_s
    log = AttemptLog(clock=dispatcher.clock)
    errors: list[UpstreamError] = []
    queue = list(plan.candidates)
    pending: dict[asyncio.Task[None], Attempt] = {}
    hedge_tried = False

    def start_next(as_hedge: bool) -> Attempt | None:
        while queue and log.attempts < policy.max_attempts:
            remaining = deadline - dispatcher.clock()
            if remaining <= 0:
                return None
            attempt = dispatcher.admit(request, queue.pop(0))
            if attempt is None:
                continue
            log.attempts += 1
            attempt.number = log.attempts
            attempt.is_hedge = attempt.hedged = as_hedge
            pending[asyncio.ensure_future(dispatcher.open(request, plan, attempt, remaining))] = attempt
            return attempt
        return None

    try:
        while True:
            if not pending:
                started = start_next(False)
                if started is None:
                    break
                if errors:
                    dispatcher.fallback(request, errors[-1], started.candidate)
            timeout: float | None = None
            primary = next(iter(pending.values()))
            if not hedge_tried and len(pending) == 1 and primary.candidate.hedge_after_s is not None:
                timeout = max(0.0, primary.sent_at + primary.candidate.hedge_after_s - dispatcher.clock())
            done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                hedge_tried = True
                if queue and log.attempts < policy.max_attempts and dispatcher.router.try_hedge(plan):
                    hedge = start_next(True)
                    if hedge is not None:
                        primary.hedged = True
                        dispatcher.observer.hedge_started(model, primary.candidate.name, hedge.candidate.name)
                continue
            answered: list[Attempt] = []
            for task in done:
                attempt = pending.pop(task)
                error = task.exception()
                if error is None:
                    answered.append(attempt)
                elif isinstance(error, UpstreamError):
                    error.provider = error.provider or attempt.candidate.provider.name
                    errors.append(error)
                elif isinstance(error, ClientFault):
                    log.commit(attempt)
                    return FullReply(error.status, error.body, error.content_type, log)
                else:
                    raise error
            if answered:
                answered.sort(key=first_output_at)
                for late in answered[1:]:
                    dispatcher.abandon(request, late)
                winner = answered[0]
                dispatcher.commit(request, log, winner)
                if winner.hedged:
                    _hedge_ended(dispatcher, model, winner, [*answered[1:], *pending.values()])
                return StreamReply(dispatcher, request, winner, log, plan, queue)
    finally:
        # Losers (and, on a client disconnect, everyone) are cancelled; each records its own sample.
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    error = final_error(errors, log.attempts, deadline_passed=dispatcher.clock() >= deadline)
    error.headers["x-gateway-attempts"] = str(log.attempts)
    raise error


def _hedge_ended(dispatcher: Dispatcher, model: str, winner: Attempt, losers: list[Attempt]) -> None:
    dispatcher.metrics.hedge(model, winner.candidate.provider.name, "won")
    for loser in losers:
        dispatcher.metrics.hedge(model, loser.candidate.provider.name, "lost")
    hedge = winner if winner.is_hedge else next((a for a in losers if a.is_hedge), None)
    if hedge is winner:
        dispatcher.observer.hedge_won(model, winner.candidate.name)
    elif hedge is not None:
        dispatcher.observer.hedge_lost(model, hedge.candidate.name)
