"""How one relayed upstream stream ended: its outcome, the client stream's last bytes, and whether to try recovery.

``StreamReply`` asks ``stream_ending`` once per upstream stream that did not end plainly with its ending relayed.
An error event the provider sent after the client had bytes is relayed as is, but for one that refuses the
gateway's key (``gateway.errors.credentials_refusal``): that one is said as a 401 or 403 answer is (the deployment
named, none of the provider's words or code, which may quote the key's ends and would tell the client that *its*
key is wrong), and recorded as the status it stands for, so that the deployment's circuit opens at once.

A stream cut by the request's own total deadline while the provider was still sending is no failure of the
provider: the answer was longer than the request allowed. It ends the client's stream with an error event that says
so (code ``deadline_exceeded``) and is recorded as ``deadline``, neutral for success and health (its first token and
speed so far still count). A provider silent at the cut for longer than a healthy gap (the deployment's learned idle
deadline, else ``deadline_floor_s``) had stalled: that cut is its ``timeout``, as before.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.errors import DeadlinePassed, UpstreamError, UpstreamTimeout, credentials_refusal, refused_credentials
from gateway.reading import Reading
from gateway.relay.attempt import Attempt, is_request_fault
from gateway.relay.budget import AttemptBudget
from gateway.relay.forward import EventForwarder
from gateway.samples import Outcome
from gateway.translate.stream import StreamTranslator

Forwarder = EventForwarder | StreamTranslator
DEADLINE_CODE = "deadline_exceeded"
"""The code of the error event that ends a stream the request's total deadline cut (``stream_ending``)."""


class StreamEnding(NamedTuple):
    outcome: Outcome
    tail: bytes
    """What ends the client's stream (unless a recovery goes on with it)."""
    recoverable: bool
    """Another deployment may finish the answer (``gateway.relay.recovery``)."""
    status: int | None = None
    """The status to record, when not the response's own: a refusal of the key inside the stream's 200."""


def stream_ending(
    attempt: Attempt, forwarder: Forwarder, broken: UpstreamError | None, reading: Reading, budget: AttemptBudget
) -> StreamEnding:
    """How one upstream stream ended; ``broken``: the error its read ended with (None: it ended, or sent an error)."""
    meter = attempt.meter
    assert meter is not None
    if broken is not None and reading.finished and reading.error_message is None:
        # The answer was complete (finish_reason came); only the provider's [DONE] or its
        # close went missing: end the client's stream cleanly rather than as an error.
        return StreamEnding("ok", forwarder.clean_end(), False)
    if isinstance(broken, DeadlinePassed) and _sending(attempt, reading, budget):
        name = attempt.candidate.provider.name
        message = (
            f"the request's total deadline (total_timeout_s, or the client's x-request-timeout) passed before the "
            f"answer was complete; {name} was still sending it"
        )
        return StreamEnding("deadline", forwarder.stream_error(message, DEADLINE_CODE, reading.last_sequence), False)
    if broken is not None:
        outcome: Outcome = "timeout" if isinstance(broken, UpstreamTimeout) else "broken_stream"
        tail = forwarder.stream_error(broken.message, "upstream_stream_broken", reading.last_sequence)
        return StreamEnding(outcome, tail, True)
    if forwarder.error is not None:
        refused = credentials_refusal(forwarder.error_object)
        if refused is not None:
            candidate = attempt.candidate
            words = refused_credentials(candidate.deployment.name, refused, in_band=True)
            message = f"{candidate.provider.name}: {words}"
            tail = forwarder.stream_error(message, "upstream_error", reading.last_sequence)
            return StreamEnding("upstream_error", tail, True, refused)
        # The provider's own error event, held back: relayed (``EventForwarder.error``), unless another deployment
        # can finish (never when it blames the request: the provider's health is not at stake, and a retry would
        # fail alike).
        fault = is_request_fault(forwarder.error_object)
        return StreamEnding("client_error" if fault else "upstream_error", forwarder.error, not fault)
    if reading.error_message is not None:
        return StreamEnding("upstream_error", b"", False)
    if reading.incomplete:
        # Responses' response.incomplete, relayed as is: the request's limit or filter ended the answer.
        return StreamEnding("client_error", b"", False)
    if not meter.done and not reading.finished:
        message = f"{attempt.candidate.provider.name}: upstream stream ended before the answer was complete"
        tail = forwarder.stream_error(message, "upstream_stream_broken", reading.last_sequence)
        return StreamEnding("broken_stream", tail, True)
    # Complete: a malformed event on the way (relayed as is; SDKs skip it) is counted apart, by the caller,
    # not held against the provider's health.
    return StreamEnding("ok", b"" if meter.done else forwarder.clean_end(), False)


def _sending(attempt: Attempt, reading: Reading, budget: AttemptBudget) -> bool:
    """Whether the provider was still sending at a cut: its last output-bearing chunk (the first output and the gaps
    after it, as the meter timed them) came within a healthy gap of now. No more than that is read at the cut: the
    relay's per-chunk path keeps no time of its own for this."""
    meter = attempt.meter
    if meter is None or meter.first_output_at is None:
        return False
    last_output_at = meter.first_output_at + sum(reading.chunk_gaps_s)
    healthy_gap_s = attempt.candidate.idle_timeout_s or budget.policy.deadline_floor_s
    return budget.clock() - last_output_at <= healthy_gap_s
