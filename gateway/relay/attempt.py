"""One attempt at one deployment, the log of a request's attempts, and how failed attempts become errors.

``retry_after`` reads an upstream's ``Retry-After``; ``final_error`` picks the client's error when
no attempt answered (the last upstream's message and status kept). Error bodies and error events
are read by ``gateway.errors.describe_error_body`` / ``describe_error``.
"""

from __future__ import annotations

import email.utils
import math
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gateway.errors import (
    UNAVAILABLE_FOR_NOW,
    GatewayError,
    NoCapacity,
    RateLimited,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.meter import StreamMeter
from gateway.reading import Reading
from gateway.relay.echo import EchoedPrompt
from gateway.routing import Candidate
from gateway.routing.capacity import RateLimits
from gateway.samples import Outcome
from gateway.types import Clock, InputKind, RouteReason
from gateway.upstream import UpstreamResponse

# Upstream statuses that are the request's fault: relayed to the client, never retried, and
# not held against the provider's health.
CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
# The same for error events inside a stream, which carry no status: their type or code.
CLIENT_FAULT_TYPES = frozenset({"invalid_request_error"})
CLIENT_FAULT_CODES = frozenset(
    {"context_length_exceeded", "content_filter", "content_policy_violation", "invalid_prompt", "invalid_request_error"}
)
# Error codes that say the provider's model failed, whatever the status or type beside them: Groq's
# ``tool_use_failed`` (a 400 ``invalid_request_error``: its model wrote a tool call Groq could not parse). Another
# deployment may well answer, and the failure is held against this one.
MODEL_FAULT_CODES = frozenset({"tool_use_failed"})


@dataclass(slots=True)
class Attempt:
    """One upstream request of a client request, from admission to its ``Sample``. Per request, not shared."""

    candidate: Candidate
    sent_at: float
    started_wall: float
    response: UpstreamResponse | None = None
    status: int | None = None
    meter: StreamMeter | None = None
    held: list[bytes] = field(default_factory=list)
    """Chunks read before the first token, sent to the client together with it."""
    body: bytes = b""
    hedged: bool = False
    """This attempt ran beside another (as the primary or as the hedge)."""
    is_hedge: bool = False
    """This attempt is the hedge, started because the primary's first token was late."""
    number: int = 0
    """1 for the request's first attempt, 2 for the next, ..."""
    rate_limits: RateLimits | None = None
    """The budget the provider's response headers reported (None: no response yet)."""
    recorded: bool = False
    """Its Sample was made (``AttemptRunner.record``): it holds no slot any more."""
    unseen: bool = False
    """A shadow probe (``gateway.relay.drain``): never the client's answer, so the request's timings are not its."""
    whole: tuple[Reading, Outcome] | None = None
    """A whole answer's reading and outcome, once read (``AttemptRunner.read_whole``): an answer judged before it is
    sent (``retry_invalid``) is recorded from the same reading, not read twice."""
    echo: EchoedPrompt | None = None
    """A completions stream that echoes its prompt: what it echoed (``gateway.relay.echo``)."""


@dataclass(slots=True)
class AttemptLog:
    """What the attempts of one request did, for the response headers and the access log."""

    attempts: int = 0
    """Attempts started (kept by the request's ``AttemptBudget``)."""
    winner: Candidate | None = None
    route: RouteReason = "best-score"
    clock: Clock = time.perf_counter
    status: int | None = None
    """The status sent to the client, once the reply started."""
    first_byte_at: float | None = None
    """Clock reading once the reply's first body bytes were handed to the server."""

    def commit(self, attempt: Attempt) -> None:
        """Note the attempt whose answer goes to the client, and why it was the one."""
        self.winner = attempt.candidate
        if attempt.is_hedge:
            # A race's members start at once under their own reasons (a look, a cold start's probes: explore; the
            # leader beside its look: best-score, affinity, override); a hedge is a fallback started early.
            reason = attempt.candidate.reason
            self.route = "hedge" if reason == "fallback" else reason
        else:
            self.route = attempt.candidate.reason if attempt.number == 1 else "fallback"


class Opened(NamedTuple):
    """The attempt a request committed to, and the plan's candidates that may still serve it (for recovery).

    ``spare``: those not tried, and a race's losers (stopped because another answered first, not failed);
    never one that failed this request.
    """

    attempt: Attempt
    spare: tuple[Candidate, ...]


class ClientFault(Exception):
    """An upstream 4xx that is the request's fault: relayed to the client as is.

    ``unsupported``: the kind of input (``image``, ``audio``) the deployment said it does not accept, whatever its
    status (``gateway.relay.context.refused_input``): the request's fault there only, another deployment may serve it.
    """

    def __init__(self, status: int, body: bytes, content_type: str, unsupported: InputKind | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.content_type = content_type
        self.unsupported = unsupported


def is_request_fault(error: Any) -> bool:
    """Whether an error event's ``error`` object blames the request (retrying elsewhere would not help)."""
    if not isinstance(error, dict) or error.get("code") in MODEL_FAULT_CODES:
        return False
    return error.get("type") in CLIENT_FAULT_TYPES or error.get("code") in CLIENT_FAULT_CODES


def first_output_at(attempt: Attempt) -> float:
    meter = attempt.meter
    return 0.0 if meter is None or meter.first_output_at is None else meter.first_output_at


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date; None for anything else.

    ``float`` also reads ``inf``, ``nan`` and ``1e400`` (infinity): no wait, and an infinite one broke the
    client's own ``Retry-After`` (``math.ceil``) with a 500, so only a finite number counts."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def final_error(errors: list[UpstreamError], attempts: int, *, deadline_passed: bool) -> GatewayError:
    """The client's error when no attempt answered: the last upstream's message and status kept."""
    if not errors:
        if deadline_passed:
            return UpstreamTimeout("the request's total deadline passed before any provider was tried")
        return NoCapacity("no provider is available for this model right now (all are failing or at capacity)")
    last = errors[-1]
    summary = f"no provider could answer ({attempts} attempt{'s' if attempts != 1 else ''}); last error: {last.message}"
    wait = _come_back_in(errors)
    if all(isinstance(e, UpstreamStatusError) and e.upstream_status == 429 for e in errors):
        # A 429 always says when: 1 s when no provider did and no cool-down was given.
        return RateLimited(summary, code="upstream_rate_limited", headers={"retry-after": str(wait or 1)})
    if isinstance(last, UpstreamTimeout):
        # The gateway's own deadline, or a provider's 504 / 408 (``TIMED_OUT``): the client is told when, if said.
        headers = {"retry-after": str(wait)} if wait else None
        return UpstreamTimeout(summary, provider=last.provider, status=last.upstream_status, headers=headers)
    if isinstance(last, UpstreamStatusError) and last.upstream_status in UNAVAILABLE_FOR_NOW:
        # Unavailable for now: the client is told when, if anything said (a provider's Retry-After, a cool-down).
        return NoCapacity(summary, code="upstream_unavailable", headers={"retry-after": str(wait)} if wait else None)
    return UpstreamUnavailable(summary, provider=last.provider, status=last.upstream_status, code=last.code)


def _come_back_in(errors: list[UpstreamError]) -> int | None:
    """Whole seconds (at least 1) until the soonest failed deployment may be asked again: its provider's own
    ``Retry-After``, else the cool-down the router gave it; None when no failure said."""
    waits = [e.retry_after_s if e.retry_after_s is not None else e.cooldown_s for e in errors]
    known = [wait for wait in waits if wait is not None]
    return max(1, math.ceil(min(known))) if known else None
