"""The structured access log: one JSON line per client request, on the ``gateway.access`` logger.

Why one line per request rather than per attempt: an operator looking up a request id wants
the whole story at once (which provider answered, after how many attempts, why it was chosen,
how fast, how many tokens, what it cost). The line never holds prompt or answer text, headers
(client and provider keys travel there) or upstream error messages (they may echo the prompt),
unless ``[server] log_bodies = true`` asks for the bodies while debugging.

The same place feeds the client-level metrics (requests by status class, the gateway's own
added latency), since it is the one point that sees the request from first to last byte.

Writing: ``gateway serve`` sends the lines to stdout through ``LineWriter`` (``gateway.access_lines``),
which writes them in batches (one ``write`` and flush per batch, at most ``LineWriter.delay_s`` after a
line was handed to it) instead of one locked ``StreamHandler.emit`` and flush per request; when the
logger has no other handler, ``AccessLog`` hands it the line unbuilt, without a ``LogRecord``, and the
line is made with its batch, after the request has gone. Nothing is lost on shutdown: closing the
handler (``logging.shutdown`` at exit, or ``AccessLog.flush`` when the app stops) writes what is
pending. Anywhere else (an embedding app, tests) the lines go through the logger, one record per line.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import gateway.routing  # noqa: F401  (activates the build, ``gateway.native``, before ``access_numbers`` loads)
from gateway import access_numbers
from gateway.access_format import (
    ENCODE,
    EncodedLine,
    TakenFacts,
    entry_of,
    log_line,
)
from gateway.access_lines import ACCESS_LOGGER, LineWriter, configure_access_log, sole_writer
from gateway.access_numbers import encoded_line
from gateway.metrics.attempts import OverheadMode
from gateway.metrics.series import Metrics
from gateway.relay import AttemptLog, ProxyRequest
from gateway.relay.outbound import omitted_tools
from gateway.routing.apis import upstream_api
from gateway.samples import Endpoint, Sample
from gateway.types import Clock


@dataclass(slots=True)
class AccessRecord:
    """What one client request did, filled in while it is served. Per request, not shared."""

    request_id: str
    endpoint: Endpoint
    received_at: float
    clock: Clock
    request: ProxyRequest | None = None
    """Set once the request passed validation (its model is a configured one)."""
    log: AttemptLog | None = None
    """Set once an attempt answered (the reply's log)."""
    error_status: int | None = None
    """The status of an error the gateway answered with itself (the reply's own status is in ``log``)."""
    key_name: str | None = None
    """The client key's name (from the keys file; never the key), once authenticated and admitted."""
    team: str | None = None
    keepalives: int = 0
    """Keep-alives sent before the first byte (``relay.keepalive``); when any was, the client's status was 200
    and an error status here was an error event at the stream's end."""
    client_left: bool = False
    """The client hung up before its answer ended: the line's outcome is ``client_cancelled``, whatever the attempt
    it waited on says (a stream that broke and was being continued elsewhere when the client left, say)."""

    @property
    def status(self) -> int | None:
        """The status sent to the client; None if the client left before a response started (a keep-alive's 200,
        sent before any reply, is a start)."""
        if self.error_status is not None:
            return self.error_status
        if self.log is not None:
            return self.log.status
        return 200 if self.keepalives else None

    @property
    def first_byte_at(self) -> float | None:
        """Clock reading once the reply's first body bytes were handed to the server."""
        return self.log.first_byte_at if self.log is not None and self.error_status is None else None

    def winner(self) -> Sample | None:
        """The attempt that answered, else the last one tried."""
        samples = self.request.trace.samples if self.request is not None else []
        winner = samples[-1] if samples else None
        if self.log is not None and self.log.winner is not None:
            name = self.log.winner.deployment.name
            winner = next((sample for sample in reversed(samples) if sample.deployment == name), winner)
        return _as_left(winner) if self.client_left else winner

    def upstream_api(self) -> Endpoint | None:
        """The API the answering deployment was sent the request in (the client's own unless translated)."""
        if self.log is None or self.log.winner is None:
            return None
        return upstream_api(self.log.winner.deployment, self.endpoint)

    def omitted_tools(self) -> list[str] | None:
        """The built-in tools left out of the request the answering deployment was sent (None: none)."""
        if self.request is None or self.log is None or self.log.winner is None:
            return None
        return list(omitted_tools(self.request, self.log.winner.deployment)) or None

    def overhead_s(self) -> float | None:
        """Client-seen time to the answer minus the time spent waiting on upstreams.

        That is: receipt → first upstream request sent (parse, auth, route), plus upstream
        answer ready (first output chunk, or whole body) → first byte handed to the client.
        Failed attempts before the winner count as upstream time, not as the gateway's, and so
        does a wait for a free slot (``queue_wait_s`` in the line): the providers were full.
        """
        log = self.log
        if self.request is None or log is None or self.error_status is not None:
            return None  # no first byte handed over (``first_byte_at``, inline: a property call per request)
        first_byte_at = log.first_byte_at
        if first_byte_at is None:
            return None
        trace = self.request.trace
        if trace.upstream_sent_at is None or trace.upstream_ready_at is None:
            return None
        before = trace.upstream_sent_at - self.received_at - trace.queue_wait_before_sent_s
        return before + (first_byte_at - trace.upstream_ready_at)


class AccessLog:
    """Writes the access-log line of each request and counts it in the metrics.

    Usage: ``AccessLog(metrics, enabled=True).write(record)`` once the request is over.
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        enabled: bool = True,
        log_bodies: bool = False,
        logger: logging.Logger | None = None,
        wall_clock: Clock = time.time,
    ) -> None:
        self.metrics = metrics
        self.enabled = enabled
        self.log_bodies = log_bodies
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        self.wall_clock = wall_clock
        self._second: tuple[int | None, str] = (None, "")
        """``timestamp``'s last whole second and its ISO form up to the seconds: one ``datetime`` a second (one
        attribute, replaced whole: a batch written at exit, from another thread, reads a matching pair)."""
        self._stamp: Callable[[float], str] = (
            access_numbers.Stamps().text if access_numbers.COMPILED else self.timestamp
        )
        """``timestamp`` as the line calls it: the compiled ``Stamps`` where the build is used (the same text)."""

    def timestamp(self, at: float) -> str:
        """``datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")``, in half its time.

        The second's text is made once per second; the milliseconds come from the fraction as ``datetime`` takes
        it (its microseconds rounded half to even, a carry into the next second, then truncated to milliseconds).
        """
        fraction, whole = math.modf(at)
        micros = round(fraction * 1e6)
        second = int(whole)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        if at < 0 or micros < 0:
            return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")  # before 1970: never here
        cached = self._second
        if second != cached[0]:
            cached = self._second = (second, datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6])
        return f"{cached[1]}.{micros // 1000:03d}+00:00"

    def write(self, record: AccessRecord) -> None:
        """Count the request in the metrics and write its line: the winner, the status and the upstream API worked
        out once and handed to both (each used to find its own).

        What the line says is taken now (``_taken``: the request's trace may still change, a race's drained loser
        adds its sample to it); to a sole ``LineWriter`` the line goes unbuilt, made from what was taken when its
        batch is written, many lines together, after the request has gone.
        """
        duration = record.clock() - record.received_at
        request, log = record.request, record.log
        # ``record.winner()``, ``record.status``, ``record.upstream_api()`` and ``record.overhead_s()``, inline: each
        # read once, here, in this frame.
        samples = request.trace.samples if request is not None else []
        answered = log.winner if log is not None else None
        winner = samples[-1] if samples else None
        if answered is not None:
            name = answered.deployment.name
            for sample in reversed(samples):
                if sample.deployment == name:
                    winner = sample
                    break
        status = record.error_status
        if status is None:
            # ``record.status``, inline: the reply's, else the keep-alives' 200 (the client left before any reply)
            status = log.status if log is not None else (200 if record.keepalives else None)
        if record.client_left:
            winner = _as_left(winner)
        upstream = upstream_api(answered.deployment, record.endpoint) if answered is not None else None
        model = request.requested_model if request is not None else ""
        provider = winner.provider if winner is not None and log is not None else ""
        overhead = None
        first_byte_at = log.first_byte_at if log is not None and record.error_status is None else None
        if request is not None and first_byte_at is not None:
            trace = request.trace
            if trace.upstream_sent_at is not None and trace.upstream_ready_at is not None:
                before = trace.upstream_sent_at - record.received_at - trace.queue_wait_before_sent_s
                overhead = before + (first_byte_at - trace.upstream_ready_at)
        mode: OverheadMode | None = None
        if overhead is not None and request is not None:
            mode = "stream" if request.stream else "full"
        self.metrics.request_done(model, provider, record.endpoint, upstream, status, mode, overhead)
        if self.enabled and self.logger.isEnabledFor(logging.INFO):
            taken = self._taken(record, duration, overhead, winner, status, upstream)
            writer = sole_writer(self.logger)
            if writer is not None:
                writer.add(partial(self._made, taken))
            else:
                self.logger.info(self._made(taken))

    def flush(self) -> None:
        """Write every line still pending in a batch (at shutdown)."""
        for handler in self.logger.handlers:
            handler.flush()

    def entry(self, record: AccessRecord, duration: float, overhead: float | None) -> dict[str, Any]:
        """The line's fields. Numbers only for what was measured; None (null) for what was not."""
        winner, status, upstream = record.winner(), record.status, record.upstream_api()
        taken = self._taken(record, duration, overhead, winner, status, upstream)
        return self._with_bodies(entry_of(self._encoded(taken)), taken)

    def _taken(
        self,
        record: AccessRecord,
        duration: float,
        overhead: float | None,
        winner: Sample | None,
        status: int | None,
        upstream: Endpoint | None,
    ) -> TakenFacts:
        """What the line will say, taken now, in a plain tuple (the samples' list copied; with ``log_bodies`` the
        answer text and the request body, else neither is held by a pending line): the line is made from it by
        ``_made``, with its batch. ``upstream`` is ``record.upstream_api()``, as the caller found it."""
        request, log = record.request, record.log
        # ``record.omitted_tools()``, from the upstream API found already: an answer in the client's own API (or
        # none at all) left no tool out.
        omitted = None if upstream is None or upstream == record.endpoint else record.omitted_tools()
        if request is None:
            return (
                self.wall_clock(), record.request_id, record.endpoint, upstream, omitted,
                log.route if log is not None else None, record.key_name, record.team, record.keepalives, status,
                duration, overhead, winner, [], 0, None, None, None, None, None, None,
            )  # fmt: skip
        trace = request.trace
        bodies = (trace.answer_text, request.body) if self.log_bodies else None
        return (
            self.wall_clock(), record.request_id, record.endpoint, upstream, omitted,
            log.route if log is not None else None, record.key_name, record.team, record.keepalives, status,
            duration, overhead, winner, list(trace.samples), trace.said_tokens, trace.prompt_tokens_counted,
            request.requested_model, request.stream, trace.queue_wait_s, trace.provider_timings, bodies,
        )  # fmt: skip

    def _made(self, taken: TakenFacts) -> str:
        """The line of ``_taken``'s tuple, encoded from its ``EncodedLine`` (no dict), or from the line's dict with
        the bodies when ``log_bodies`` asked for them."""
        line = encoded_line(taken, self._stamp(taken[0]))  # ``_encoded``, inline
        if taken[-1] is None:
            try:
                return ENCODE(line).decode()
            except UnicodeEncodeError:
                pass  # a lone surrogate has no UTF-8 form: ``log_line`` writes it escaped
        return log_line(self._with_bodies(entry_of(line), taken))

    @staticmethod
    def _with_bodies(entry: dict[str, Any], taken: TakenFacts) -> dict[str, Any]:
        """The line's dict with the request's body and answer text (``log_bodies``; their keys written when null)."""
        bodies = taken[-1]
        if bodies is not None:
            entry["request_body"] = bodies[1]
            entry["response_text"] = bodies[0]
        return entry

    def _encoded(self, taken: TakenFacts) -> EncodedLine:
        """The line's fields, worked out from ``_taken``'s tuple (``access_numbers.encoded_line``, compiled where the
        build is used)."""
        return encoded_line(taken, self._stamp(taken[0]))


def _as_left(winner: Sample | None) -> Sample | None:
    """The line's sample of a request whose client hung up: the attempt's own figures, the outcome the client's."""
    if winner is None or winner.outcome == "client_cancelled":
        return winner
    return replace(winner, outcome="client_cancelled")


__all__ = [
    "ACCESS_LOGGER",
    "AccessLog",
    "AccessRecord",
    "LineWriter",
    "configure_access_log",
    "log_line",
    "sole_writer",
]
