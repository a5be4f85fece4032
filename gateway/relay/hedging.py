"""Hedged streams: attempts run as tasks, and the first to produce a token wins.

When the primary's first token is later than its ``hedge_after_s`` (and the model's hedge
budget allows), the next candidate starts beside it. Whichever produces a token first is
committed; the other is cancelled, which closes its upstream connection and records its
sample (``hedged=True``, its prompt's cost counted), or, if it is a probe, drained: read on unseen
until its stream is measured (``gateway.relay.drain``). A failure of either leaves the other
running; when both have failed, plain fallback goes on (or a retry of the one that failed last,
when ``retry`` says waiting for it pays).

A refusal decides a race. A request-blaming 4xx (a content filter, a bad parameter) is relayed as
is, as it would be without a race: another deployment's answer must not reach the client around
it because it happened to come first. So the winner's first bytes are held for up to
``REFUSAL_GRACE_S`` while any other racer has no status yet (or an error status still being
read); a refusal within it ends the request in that refusal. A ``context_length_exceeded`` (or input the
deployment does not accept) is the refusal that is the deployment's, not the request's (``gateway.relay.context``):
a racer still running beside it (on a deployment that took the prompt, so a larger window) is kept, and
the refused deployment's window learned, instead of cancelling it and calling it again.
"""

from __future__ import annotations

import asyncio

from gateway.errors import UpstreamError
from gateway.relay.attempt import Attempt, ClientFault, Opened, first_output_at
from gateway.relay.budget import AttemptBudget
from gateway.relay.context import refused_here
from gateway.relay.drain import Drains, is_drained
from gateway.relay.request import ProxyRequest
from gateway.relay.retry import Retries
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate, RoutePlan

REFUSAL_GRACE_S = 0.05
"""How long a race's winner waits, at most, for the other racers' statuses before its first bytes go out: a
request-blaming refusal among them decides the request. Tens of ms: about one status's latency spread on a
warm connection, small beside any first token."""


async def race(
    runner: AttemptRunner, budget: AttemptBudget, request: ProxyRequest, plan: RoutePlan, drains: Drains | None = None
) -> Opened:
    """The attempt loop with hedging; raises ``ClientFault``, or the budget's error if no attempt answers.

    ``drains``: where a losing probe is read on for its stream (``gateway.relay.drain``); None cancels it.
    """
    model = plan.candidates[0].model
    committed = False
    queue: tuple[Candidate, ...] = plan.candidates
    pending: dict[asyncio.Task[None], Attempt] = {}
    hedges_left = plan.race_width - 1
    if len(plan.race) > 1:
        # The probes beyond the first measure: the request keeps the fallbacks a one-probe race leaves it.
        budget.extra = plan.race_width - 2
    retries = Retries()
    lone = len(queue) == 1
    again = False  # the queue's head is a retry of the attempt that just failed

    async def start_next(as_hedge: bool) -> Attempt | None:
        """The next candidate with room (a primary waits for one when all are full; a hedge does not)."""
        nonlocal queue, again
        if not queue or not budget.allows_another():
            return None
        opened = await runner.start_first(request, queue, budget, as_hedge=as_hedge, retry=again)
        again = False
        if opened is None:
            if not as_hedge:
                queue = ()
            return None
        attempt, queue = opened
        if not as_hedge:
            runner.fall_back(budget, attempt.candidate)
        pending[asyncio.ensure_future(runner.open(request, attempt, budget))] = attempt
        return attempt

    try:
        while True:
            if not pending and await start_next(False) is None:
                break
            timeout: float | None = None
            primary = next(iter(pending.values()))
            newest = next(reversed(pending.values()))
            # The next attempt joins when the newest one's first token is later than its hedge_after_s: a hedge
            # beside the primary, or a race's second probe and then its leader.
            if hedges_left > 0 and newest.candidate.hedge_after_s is not None:
                timeout = max(0.0, newest.sent_at + newest.candidate.hedge_after_s - runner.clock())
            done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                hedges_left -= 1
                if queue and budget.allows_another() and runner.router.try_hedge(plan):
                    hedge = await start_next(True)
                    if hedge is not None:
                        for running in pending.values():
                            running.hedged = True
                        runner.events.hedge_started(model, primary.candidate.name, hedge.candidate.name)
                else:
                    hedges_left = 0
                continue
            answered: list[Attempt] = []
            # Answers first: a racer's context-length refusal that ended with another's answer is that racer's.
            for task in sorted(done, key=lambda t: t.exception() is not None):
                attempt = pending.pop(task)
                error = task.exception()
                if error is None:
                    answered.append(attempt)
                elif isinstance(error, UpstreamError):
                    failed = attempt.candidate
                    budget.failed(error, failed)
                    # Alone again: ask it again after a wait, when that is predicted to pay.
                    alone = not pending and not answered and len(done) == 1
                    if alone and await retries.ask_again(runner, budget, failed, error, queue, lone):
                        queue = (failed, *queue)
                        again = lone
                elif isinstance(error, ClientFault):
                    if refused_here(runner.router, budget, attempt.candidate, error)[0] and (pending or answered):
                        continue  # too long for it alone: a racer still running took the prompt
                    runner.commit_refusal(budget, attempt)
                    raise error
                else:
                    raise error
            if answered and pending:
                refused = await _hold_for_refusals(runner, budget, pending, answered)
                if refused is not None:
                    for late in answered:
                        runner.abandon(request, late)
                    runner.commit_refusal(budget, refused[0])
                    raise refused[1]
            if answered:
                answered.sort(key=first_output_at)
                for late in answered[1:]:
                    if drains is not None and is_drained(late):
                        drains.start(request, late, None)
                    else:
                        runner.abandon(request, late)
                winner = answered[0]
                runner.commit(request, budget, winner)
                committed = True
                beaten = [*answered[1:], *pending.values()]
                if winner.hedged:
                    _hedge_ended(runner, model, winner, beaten)
                return Opened(winner, _spare(plan, winner, queue, beaten))
    finally:
        # Losers (and, on a client disconnect, everyone) are cancelled; each records its own sample. A losing
        # probe of a committed request is drained instead: read on for its stream, unseen.
        if committed and drains is not None:
            for task, attempt in list(pending.items()):
                if is_drained(attempt):
                    drains.start(request, attempt, task)
                    del pending[task]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            for attempt in pending.values():
                if not attempt.recorded:
                    # Cancelled before its task first ran: ``open`` never started, so nothing freed its slot.
                    runner.fail(request, attempt, "client_cancelled", None)
    raise budget.exhausted()


def _spare(
    plan: RoutePlan, winner: Attempt, queue: tuple[Candidate, ...], beaten: list[Attempt]
) -> tuple[Candidate, ...]:
    """Who may still serve the request if the winner's stream breaks, in the plan's order: the candidates not
    started (``queue``) and the racers the winner beat. Those were stopped (cancelled or drained), not failed: a
    race that started every candidate must not leave a broken stream nobody may continue."""
    names = {c.name for c in queue} | {a.candidate.name for a in beaten}
    names.discard(winner.candidate.name)
    queued = {c.name: c for c in queue}
    return tuple(queued.get(c.name, c) for c in plan.candidates if c.name in names)


def _hedge_ended(runner: AttemptRunner, model: str, winner: Attempt, losers: list[Attempt]) -> None:
    won = winner.candidate
    runner.events.hedge_ended(model, won.name, won.provider.name, "won", winner.is_hedge)
    for loser in losers:
        lost = loser.candidate
        runner.events.hedge_ended(model, lost.name, lost.provider.name, "lost", loser.is_hedge)


def _unsettled(attempt: Attempt) -> bool:
    """No status yet, or an error status whose body is still being read: it may yet refuse the request."""
    return attempt.status is None or attempt.status >= 400


async def _hold_for_refusals(
    runner: AttemptRunner,
    budget: AttemptBudget,
    pending: dict[asyncio.Task[None], Attempt],
    answered: list[Attempt],
) -> tuple[Attempt, ClientFault] | None:
    """Wait up to ``REFUSAL_GRACE_S`` for the racers without a status; the first request-blaming refusal, if any.

    Racers that answer meanwhile join ``answered``; those that fail are the budget's, as in the race.
    """
    ends = runner.clock() + REFUSAL_GRACE_S
    while any(_unsettled(a) for a in pending.values()):
        left = ends - runner.clock()
        if left <= 0:
            return None
        done, _ = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            attempt = pending.pop(task)
            error = task.exception()
            if error is None:
                answered.append(attempt)
            elif isinstance(error, ClientFault):
                if not refused_here(runner.router, budget, attempt.candidate, error)[0]:
                    return attempt, error
            elif isinstance(error, UpstreamError):
                budget.failed(error, attempt.candidate)
            else:
                raise error
    return None
