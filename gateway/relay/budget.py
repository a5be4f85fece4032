"""One request's allowance of attempts: a deadline, a count, and the failures spent so far.

Every attempt of a request, whichever loop starts it (in order, a hedged race, a mid-stream
continuation), is counted here, so that ``max_attempts`` and the total deadline hold across them
all, attempts are numbered once, and the client's error, when none answered, is built from the
failures in one place (with its ``x-gateway-attempts`` header).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.errors import GatewayError, UpstreamError
from gateway.policies import PolicyConfig
from gateway.relay.attempt import Attempt, AttemptLog, final_error
from gateway.routing import Candidate
from gateway.types import Clock


@dataclass(slots=True)
class AttemptBudget:
    """Created per request (``for_request``), not shared. ``policy`` holds the attempts' timeouts."""

    policy: PolicyConfig
    log: AttemptLog
    """What the attempts did (winner, route, status), for the response headers and the access log."""
    deadline: float
    """Clock reading past which no attempt may start (the request's ``received_at + total_timeout_s``)."""
    clock: Clock
    used: int = 0
    """Attempts started so far."""
    errors: list[UpstreamError] = field(default_factory=list)
    """Failures before the first byte, in the order they happened."""
    failed_at: list[Candidate] = field(default_factory=list)
    """The candidate of each of ``errors``."""
    extra: int = 0
    """Attempts allowed beyond ``max_attempts``: a race's second probe (it measures; the fallbacks stay)."""
    refused_here: list[str] = field(default_factory=list)
    """Deployments that refused this request as theirs alone to refuse (its prompt too long for their window, input
    they do not accept: ``gateway.relay.context``): never asked again, whichever loop saw the refusal (a race goes
    on without telling the dispatcher)."""
    _followed: int = 0

    @classmethod
    def for_request(
        cls, policy: PolicyConfig, received_at: float, clock: Clock, timeout_s: float | None = None
    ) -> AttemptBudget:
        """``timeout_s``: the client's own deadline (``x-request-timeout``), kept when shorter than the policy's."""
        log = AttemptLog(clock=clock)
        total = policy.total_timeout_s if timeout_s is None else min(policy.total_timeout_s, timeout_s)
        return cls(policy=policy, log=log, deadline=received_at + total, clock=clock)

    def remaining_s(self) -> float:
        return self.deadline - self.clock()

    def allows_another(self) -> bool:
        return self.used < self.policy.max_attempts + self.extra and self.remaining_s() > 0

    def spend(self, attempt: Attempt) -> None:
        """Count ``attempt`` against the budget and give it its number (1 for the first)."""
        self.used += 1
        self.log.attempts = self.used
        attempt.number = self.used

    def failed(self, error: UpstreamError, candidate: Candidate) -> None:
        """An attempt at ``candidate`` failed before any byte reached the client."""
        error.provider = error.provider or candidate.provider.name
        # Kept for its message and status only. Its traceback (and its cause's, the wire's frames) would hold the
        # frames of the loop that caught it, this budget among their locals: a cycle per broken attempt.
        error.__traceback__ = error.__cause__ = error.__context__ = None
        self.errors.append(error)
        self.failed_at.append(candidate)

    def unfollowed_failure(self) -> Candidate | None:
        """Where the latest failure happened, if no attempt was started since (a fallback is starting)."""
        if len(self.errors) == self._followed:
            return None
        self._followed = len(self.errors)
        return self.failed_at[-1]

    def exhausted(self) -> GatewayError:
        """The client's error when no attempt answered: the last upstream's message and status kept."""
        error = final_error(self.errors, self.used, deadline_passed=self.remaining_s() <= 0)
        error.headers["x-gateway-attempts"] = str(self.used)
        return error
