"""Drained losers: a race's losing probe is read on, unseen by the client, until its stream is measured.

A probe that loses its race to the first token would otherwise leave only a lower bound on its
first token, and nothing of its stream: a deployment slower to its first token but faster to
stream (or one that recovered while losing on the first token) would never show it, and the
races it loses bias its estimate towards what it used to be. So when the request commits to
another attempt, each probe still racing is drained instead of cancelled: its first token is
waited for (within its first-token deadline, and within ``LOSER_HOLD_RATIO`` times what the winner
took, at least ``LOSER_HOLD_MIN_S``: past that it has lost clearly, and what it waited is its
censored measure), its stream read to ``DRAIN_EVENTS`` events or for ``DRAIN_MAX_S`` after its first
token, whichever comes first, and then it is closed. A silent loser so holds its slot (and its
provider's connection) for about a second, not its 30 s first-token deadline. Its sample
is a cancelled attempt (``client_cancelled``: neutral for the provider's success rate, no
end-to-end) carrying its real first token and tokens/s, which the router counts as an answer.
The provider bills what it produced; the sample's cost says so, and spend settles it once it ends
(``usage.UsageTally.late``, when the request has already been released).

A *shadow* probe (``RoutePlan.shadow``) is drained from the start: sent beside the request's
first attempt, it is never its answer. Exploration sends one where no race is affordable (the
probe would likely win the first token, then stream a long answer much slower): it costs the
client nothing and still measures the contender.

Only probes (``Candidate.reason == "explore"``) are drained: exploration is bounded by its budget,
so the extra tokens are too. ``Drains`` holds the tasks, so that a runtime closing
cancels them instead of leaving them to read from closed connections.
"""

from __future__ import annotations

import asyncio

import msgspec

from gateway.errors import UpstreamError
from gateway.policies import PolicyConfig
from gateway.relay.attempt import Attempt, ClientFault
from gateway.relay.budget import AttemptBudget
from gateway.relay.first_token import refused_stream
from gateway.relay.request import ProxyRequest
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate
from gateway.routing.worth import DRAIN_EVENTS, DRAIN_MAX_S  # what a look's cost counts a drain to read
from gateway.sse import EventTooLarge

LOSER_HOLD_RATIO = 4.0
"""A drained loser waits for its first token at most this many times what it had waited when the race was decided
(about the winner's first token): four times slower has lost clearly, whatever its exact first token."""
LOSER_HOLD_MIN_S = 1.0
"""... and at least this long: a winner on a warm connection answers in milliseconds."""


def is_drained(attempt: Attempt) -> bool:
    """Whether a losing ``attempt`` is drained rather than cancelled: a probe, or a leader on trial."""
    return attempt.candidate.drains


class Drains:
    """The drained losers still reading. One per runtime, beside its ``AttemptRunner``."""

    def __init__(self, runner: AttemptRunner) -> None:
        self.runner = runner
        self.tasks: set[asyncio.Task[None]] = set()

    def shadow(self, request: ProxyRequest, candidate: Candidate, policy: PolicyConfig) -> None:
        """Send a shadow probe (``RoutePlan.shadow``) beside the request's attempts and drain it: never its answer.

        It has a budget of its own (one attempt, the request's deadline): it counts in none of the request's
        attempts, and its failure falls back nowhere.
        """
        runner = self.runner
        budget = AttemptBudget.for_request(policy, request.received_at, runner.clock, request.timeout_s)
        attempt = runner.start(request, candidate, budget, as_hedge=True, unseen=True)
        if attempt is not None:
            self.start(request, attempt, asyncio.ensure_future(runner.open(request, attempt, budget)))

    def start(self, request: ProxyRequest, attempt: Attempt, opening: asyncio.Task[None] | None) -> None:
        """Drain ``attempt`` in the background; ``opening``: its ``AttemptRunner.open`` if it awaits its first token."""
        task = asyncio.ensure_future(self._drain(request, attempt, opening))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def aclose(self) -> None:
        """Cancel every drain still reading (each records its sample) and wait for them."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _drain(self, request: ProxyRequest, attempt: Attempt, opening: asyncio.Task[None] | None) -> None:
        runner = self.runner
        if opening is not None:
            waited = runner.clock() - attempt.sent_at
            try:
                async with asyncio.timeout(max(LOSER_HOLD_MIN_S, LOSER_HOLD_RATIO * waited) - waited):
                    await opening  # (cancelled at the timeout: ``open`` records it as cancelled)
            except (UpstreamError, ClientFault, TimeoutError):
                return  # it failed (or lost clearly) before its first token: ``open`` recorded that
        meter, response = attempt.meter, attempt.response
        assert meter is not None and response is not None  # a stream's ``open`` set both
        events = sum(chunk.count(b"\n\n") for chunk in attempt.held)
        attempt.held = []
        try:
            async with asyncio.timeout(DRAIN_MAX_S):
                while events < DRAIN_EVENTS and not meter.done:
                    chunk = await response.read_chunk()
                    if not chunk:
                        meter.end_of_stream()
                        break
                    meter.feed(chunk)
                    events += chunk.count(b"\n\n")
        except TimeoutError:
            pass  # read long enough: what arrived is its measure
        except UpstreamError as exc:
            runner.fail(request, attempt, "broken_stream", exc)
            return
        except EventTooLarge as exc:
            runner.fail(request, attempt, "broken_stream", refused_stream(attempt, str(exc)))
            return
        except asyncio.CancelledError:
            self._record(request, attempt)
            raise
        self._record(request, attempt)

    def _record(self, request: ProxyRequest, attempt: Attempt) -> None:
        assert attempt.response is not None and attempt.meter is not None  # checked by ``_drain``
        attempt.response.close()
        reading = attempt.meter.finish(self.runner.counter)
        # The client's answer came from another attempt: what it says of the provider's own timings is not this one's.
        reading = msgspec.structs.replace(reading, provider_timings=None, answer_text="")
        self.runner.record(request, attempt, "client_cancelled", reading)
