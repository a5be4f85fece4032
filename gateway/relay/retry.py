"""Retry the same deployment, or fail over to the next: decided by the predicted times, within the policy.

A failure before the first byte that is safe to repeat (a 5xx, a 429, a connection that could not
be made or was reset before the headers) does not have to cost the request its best deployment:
waiting for it (its ``Retry-After``, else a jittered back-off) and asking again may still be
faster than the next candidate. The router's prediction of each candidate's time for this
request (``Candidate.predicted_s``) decides::

    retry  when  wait + predicted(failed)  <  predicted(next)

A lone deployment (no candidate left to fail over to) always retries, within the deadline, from
its very first request: the client would otherwise get the error, and its own ``Retry-After`` (never
another model's on the same provider: ``gateway.routing.capacity`` keeps blocks per deployment) is
the wait. Between two candidates, one without a prediction of its own has the model's pooled one
(``gateway.routing.priors``); nothing measured on either side, both have the same prior, and a
wait is then pure loss: fail over. Bounded by ``retries_per_deployment`` per deployment and request, by
``max_attempts`` (each retry is an attempt) and by the total deadline (a wait that would end
past it is not taken). Timeouts are never retried here: a provider that did not answer in time
is not asked to take that long again; nor is anything after the first byte (that is
``recovery``'s).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.errors import UpstreamError, UpstreamStatusError, UpstreamTimeout
from gateway.policies import PolicyConfig
from gateway.relay.budget import AttemptBudget
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate

RETRY_AFTER_MARGIN_S = 0.05
"""Added to a ``Retry-After``: the retry comes just after the provider's window, not at its edge."""


NEVER_CURED = frozenset({501, 505})
"""5xx statuses that say what the server cannot do, not how it is doing: 501 (this endpoint or feature is not
implemented: llama.cpp's embeddings when started without them) and 505. Asked again, it answers the same."""


def safe_to_repeat(error: UpstreamError) -> bool:
    """A failure before any answer that asking again may cure: 5xx (but ``NEVER_CURED``), 429, a connection
    refused or reset."""
    if isinstance(error, UpstreamTimeout):
        # The gateway's own deadline passed: asking again would wait as long. A provider's 504 / 408 is its answer
        # (``TIMED_OUT``), retried as a 503 is.
        return error.upstream_status is not None
    if isinstance(error, UpstreamStatusError):
        status = error.upstream_status
        return status is not None and (status == 429 or (status >= 500 and status not in NEVER_CURED))
    # UpstreamUnavailable with no status: the connection failed or was reset before the headers. One with a
    # status (an error event before the first token, an empty stream) is the provider's answer: fail over.
    return error.upstream_status is None


def backoff_s(policy: PolicyConfig, retries: int, rng: random.Random) -> float:
    """The ``retries``-th (0 = first) back-off: ``retry_backoff_s`` doubled per retry, half to all of it."""
    full: float = policy.retry_backoff_s * 2.0**retries
    return full * (0.5 + 0.5 * rng.random())


def retry_wait(
    policy: PolicyConfig,
    failed: Candidate,
    error: UpstreamError,
    retries: int,
    following: Candidate | None,
    remaining_s: float,
    rng: random.Random,
) -> float | None:
    """Seconds to wait before asking ``failed`` again, or None to go on to ``following``.

    ``retries``: retries of ``failed`` already spent in this request; ``following``: the next
    candidate that could be tried (None: ``failed`` is the model's lone deployment, the
    request's only candidate); ``remaining_s``: until the deadline. The last of several
    candidates is not retried: the failures before it say more than a wait would cure. Nor is a
    429 without ``Retry-After`` while another candidate is left: the provider refused the load
    (its learned limit backs off), and overflowing is what the next candidate is for.
    """
    if retries >= policy.retries_per_deployment or not safe_to_repeat(error):
        return None
    if error.retry_after_s is not None:
        wait = error.retry_after_s + RETRY_AFTER_MARGIN_S
    else:
        wait = backoff_s(policy, retries, rng)
    if wait + (failed.predicted_s or 0.0) >= remaining_s:
        return None  # it would not answer before the deadline
    if following is None:
        return wait
    if error.upstream_status == 429 and error.retry_after_s is None:
        return None  # "too many" with no time given: a load refusal, and the next candidate may have room
    if failed.predicted_s is None or following.predicted_s is None:
        return None
    return wait if wait + failed.predicted_s < following.predicted_s else None


@dataclass(slots=True)
class Retries:
    """One request's retries of the same deployment, for whichever attempt loop runs it (in order, or a race).

    Created per request, not shared. ``spent``: retries taken so far, per deployment.
    """

    spent: dict[str, int] = field(default_factory=dict)

    async def ask_again(
        self,
        runner: AttemptRunner,
        budget: AttemptBudget,
        failed: Candidate,
        error: UpstreamError,
        untried: Sequence[Candidate],
        lone: bool,
    ) -> bool:
        """After ``failed``'s ``error`` (already the budget's): whether to ask it again, once the wait that
        ``retry_wait`` predicts pays has passed (waited here). ``untried``: the candidates left to fall back on;
        ``lone``: ``failed`` is the request's only candidate. A retry never takes the last attempt from a
        candidate still untried."""
        room = budget.used + 1 < budget.policy.max_attempts + budget.extra
        if not (lone or (untried and room)):
            return False
        following = None if lone else untried[0]
        spent = self.spent.get(failed.name, 0)
        wait = retry_wait(budget.policy, failed, error, spent, following, budget.remaining_s(), runner.rng)
        if wait is None or not budget.allows_another():
            return False
        self.spent[failed.name] = spent + 1
        await runner.wait_to_retry(wait)
        return True
