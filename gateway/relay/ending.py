"""How one relayed upstream stream ended: its outcome, the client stream's last bytes, and whether to try recovery.

``StreamReply`` asks ``stream_ending`` once per upstream stream that did not end plainly with its ending relayed.
An error event the provider sent after the client had bytes is relayed as is, but for one that refuses the
gateway's key (``gateway.errors.credentials_refusal``): that one is said as a 401 or 403 answer is (the deployment
named, none of the provider's words or code, which may quote the key's ends and would tell the client that *its*
key is wrong), and recorded as the status it stands for, so that the deployment's circuit opens at once.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.errors import UpstreamError, UpstreamTimeout, credentials_refusal, refused_credentials
from gateway.reading import Reading
from gateway.relay.attempt import Attempt, is_request_fault
from gateway.relay.forward import EventForwarder
from gateway.samples import Outcome
from gateway.translate.stream import StreamTranslator

Forwarder = EventForwarder | StreamTranslator


class StreamEnding(NamedTuple):
    outcome: Outcome
    tail: bytes
    """What ends the client's stream (unless a recovery goes on with it)."""
    recoverable: bool
    """Another deployment may finish the answer (``gateway.relay.recovery``)."""
    status: int | None = None
    """The status to record, when not the response's own: a refusal of the key inside the stream's 200."""


def stream_ending(
    attempt: Attempt, forwarder: Forwarder, broken: UpstreamError | None, reading: Reading
) -> StreamEnding:
    """How one upstream stream ended; ``broken``: the error its read ended with (None: it ended, or sent an error)."""
    meter = attempt.meter
    assert meter is not None
    if broken is not None and reading.finished and reading.error_message is None:
        # The answer was complete (finish_reason came); only the provider's [DONE] or its
        # close went missing: end the client's stream cleanly rather than as an error.
        return StreamEnding("ok", forwarder.clean_end(), False)
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
