"""Committed answers, written to the client: a whole JSON body, or a stream relayed as it comes.

A stream is committed to the client when its first output-bearing chunk arrives; from then
on, bytes go to the client as they come, each chunk flushed at once and never re-serialised
(``EventForwarder`` only holds back an unfinished event), while a ``StreamMeter`` watches them
on the side. If the upstream breaks after that, another deployment may finish the answer
(``recovery``: chat, completions, Messages); if none can, the client's stream ends with an error event
in its API's shape (``Dialect.stream_error``), never as if the answer were complete.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.types import Message, Send

from gateway.errors import UpstreamError
from gateway.reading import Reading
from gateway.relay.attempt import Attempt, AttemptLog
from gateway.relay.budget import AttemptBudget
from gateway.relay.deadline import Deadline
from gateway.relay.disconnect import DisconnectWatch
from gateway.relay.ending import Forwarder, stream_ending
from gateway.relay.first_token import refused_stream
from gateway.relay.forward import EventForwarder
from gateway.relay.keepalive import SSE_HEADERS
from gateway.relay.outbound import injects_usage, upstream_of
from gateway.relay.prompt_count import CountedUsage
from gateway.relay.recovery import Partial, can_continue, resume
from gateway.relay.request import ProxyRequest
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate
from gateway.samples import Outcome
from gateway.sse import EventTooLarge
from gateway.tokens import TokenCounter
from gateway.translate import as_api
from gateway.translate.stream import StreamTranslator, UsageCount

logger = logging.getLogger("gateway")
SEND_GRACE_S = 1.0
"""How long past the request's total deadline a stream's relay may still be waiting on its client: the upstream's
own total timeout (the same deadline) ends a stream still being read first; this one ends a client that stopped
reading, whose sends block while the upstream stream and its slot are held."""
FINISH_LINGER_S = 1.0
"""Once a ``finish_reason`` has arrived, how long to wait for the rest (a usage chunk, ``[DONE]``):
a provider that keeps the connection open without ``[DONE]`` must not hold the client's stream
open for a whole idle timeout."""


class Reply:
    """A committed answer, ready to be written to the client."""

    log: AttemptLog

    def headers(self) -> list[tuple[bytes, bytes]]:
        winner = self.log.winner
        headers = [
            (b"x-gateway-attempts", str(self.log.attempts).encode()),
            (b"x-gateway-route", self.log.route.encode()),
        ]
        if winner is not None:
            headers.append((b"x-gateway-provider", winner.provider.name.encode()))
            headers.append((b"x-gateway-deployment", winner.deployment.name.encode()))
        return headers

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        raise NotImplementedError


class FullReply(Reply):
    """A whole JSON body: a non-streamed answer, or an upstream client-fault error relayed as is."""

    def __init__(
        self,
        status: int,
        body: bytes,
        content_type: str,
        log: AttemptLog,
        finish: Callable[[], None] | None = None,
        estimated: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.log = log
        self._finish = finish
        self._estimated = estimated
        """Its usage is the gateway's count (a translated answer whose provider reported none): said in a header."""

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        headers = [
            (b"content-type", self.content_type.encode("latin-1")),
            (b"content-length", str(len(self.body)).encode()),
            *([(b"x-gateway-count", b"estimated")] if self._estimated else []),
            *self.headers(),
            *extra_headers,
        ]
        watch.disarm()
        try:
            self.log.status = self.status
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            await send({"type": "http.response.body", "body": self.body})
            self.log.first_byte_at = self.log.clock()
        finally:
            # The upstream answered in full: its sample is due even if the client is gone.
            if self._finish is not None:
                self._finish()


class StreamReply(Reply):
    """A stream committed to one attempt: held chunks first, then the rest as it arrives.

    If that upstream breaks mid-answer, ``recovery.resume`` may find another deployment of the plan
    (``spare``: not tried, or beaten in the first-token race; never one that failed) to finish the answer;
    its stream is then relayed on under the same headers.
    """

    def __init__(
        self,
        runner: AttemptRunner,
        budget: AttemptBudget,
        request: ProxyRequest,
        attempt: Attempt,
        spare: Sequence[Candidate] = (),
    ) -> None:
        self.runner = runner
        self.budget = budget
        self.log = budget.log
        self.request = request
        self.attempt = attempt
        self.spare = list(spare)
        self._relaying = (attempt, request)
        """The attempt being relayed now (a continuation's, after a recovery), and its request."""
        self._offered: list[str] = []
        """The deployments a recovery could still ask, as the last break found them (for its log line)."""
        self._continuable = False
        self._ended = False
        """The client's stream was ended with the upstream's last bytes, in the same ``send``."""

    async def send_to(self, send: Send, extra_headers: list[tuple[bytes, bytes]], watch: DisconnectWatch) -> None:
        """Relay the stream, within the request's total deadline: a client that stops reading blocks the sends, and
        past the deadline its upstream stream is closed and its slot freed (the attempt recorded as cancelled).

        One coroutine for the whole relay (the loop over a stream and its continuations is written here, not in a
        coroutine of its own): every upstream read that waits resumes through one frame fewer."""
        try:
            with Deadline(self.budget.remaining_s() + SEND_GRACE_S):  # ``asyncio.timeout``'s rules
                headers = [*SSE_HEADERS, *self.headers(), *extra_headers]
                start: Message | None = {"type": "http.response.start", "status": 200, "headers": headers}
                runner, attempt, request = self.runner, self.attempt, self.request
                forwarder = _forwarder(request, attempt, runner.counter)
                said: list[str] = []  # the answer text the client has from streams that broke
                while True:
                    # Looked up once per upstream stream: its chunks and its tail are redacted alike.
                    redact = runner.upstreams[attempt.candidate.provider.name].redact
                    broken = await self._relay(send, start, request, attempt, forwarder, watch, redact)
                    start = None
                    meter = attempt.meter
                    assert meter is not None
                    # A [DONE] relayed as is, with nothing held back: nothing can follow it (``stream_ending``
                    # adds no bytes and tries no recovery), so the client's stream ends before the
                    # measuring (a parse and a token count) starts; ``_relay`` ended it with the last bytes.
                    closed = broken is None and forwarder.error is None and meter.done
                    if closed and not self._ended:
                        watch.disarm()
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                    reading = meter.finish(runner.counter)
                    if closed and reading.error_message is None and not reading.incomplete:
                        # ``stream_ending``'s answer for a stream that ended with its ending relayed (the usual case),
                        # without the call: complete, no tail, nothing to recover.
                        outcome: Outcome = "ok"
                        tail = b""
                        recoverable = False
                        status = None
                    else:
                        outcome, tail, recoverable, status = stream_ending(
                            attempt, forwarder, broken, reading, self.budget
                        )
                        tail = redact(tail)
                    if outcome == "ok" and reading.malformed:
                        failed = attempt.candidate
                        runner.events.malformed_stream(request.requested_model, failed.name, failed.provider.name)
                    if not recoverable:
                        if not closed:
                            watch.disarm()
                            await send({"type": "http.response.body", "body": tail, "more_body": False})
                        runner.record(request, attempt, outcome, reading, status)
                        if said and outcome == "ok":
                            request.trace.answer_text = "".join(said) + reading.answer_text
                        return
                    runner.record(request, attempt, outcome, reading, status)
                    said.append(reading.answer_text)
                    resumed = None
                    said_tokens = 0
                    self._offered = [c.name for c in self.spare]
                    self._continuable = can_continue(self.request, reading)
                    if self._continuable:
                        text = "".join(said)
                        partial = Partial(text, runner.counter.count(text))
                        said_tokens = partial.tokens
                        resumed = await resume(runner, self.budget, self.request, self.spare, partial)
                    self._note_break(attempt, outcome, resumed[0] if resumed else None, len(said))
                    if resumed is None:
                        watch.disarm()
                        await send({"type": "http.response.body", "body": tail, "more_body": False})
                        return
                    attempt, request = resumed
                    self._relaying = (attempt, request)
                    if isinstance(forwarder, StreamTranslator):
                        # The client's stream is the translator's: the continuation is read into it, whatever its API.
                        count = _metered(request, attempt, runner.counter)
                        forwarder.continue_with(as_api(upstream_of(request, attempt.candidate)), said_tokens, count)
                    else:
                        forwarder = _forwarder(
                            request, attempt, runner.counter, continuation=True, said_tokens=said_tokens
                        )
                    request.trace.said_tokens = said_tokens
        except TimeoutError:
            watch.disarm()
            attempt, request = self._relaying
            if not attempt.recorded:  # cut between its relay and its sample (its last bytes were being sent)
                if attempt.response is not None:
                    attempt.response.close()
                reading = attempt.meter.finish(self.runner.counter) if attempt.meter is not None else Reading()
                self.runner.record(request, attempt, "client_cancelled", reading)
            if watch.abort is not None:
                watch.abort()  # its unsent bytes dropped, not held for a client that may never read them
            logger.warning(
                "request %s: the client stopped reading; its stream was cut at the request's total deadline "
                "(total_timeout_s), the upstream stream closed and its slot freed",
                self.request.request_id,
            )

    async def _relay(
        self,
        send: Send,
        start: Message | None,
        request: ProxyRequest,
        attempt: Attempt,
        forwarder: Forwarder,
        watch: DisconnectWatch,
        redact: Callable[[bytes], bytes],
    ) -> UpstreamError | None:
        """Relay one upstream stream until it ends, breaks (the error is returned) or errs.

        Each read goes out in one ``send`` (all the events the upstream had buffered: never held to wait for
        more). The read that brings the stream's ending (chat's ``[DONE]``) also ends the client's stream, in
        the same ``send``, when nothing can follow it (``_last``). On a client hang-up the attempt is
        recorded as cancelled and the cancellation goes on. ``redact``: the upstream's key masked (whole events
        only go out, ``EventForwarder``: a key split across the upstream's reads is whole here).
        """
        response, meter = attempt.response, attempt.meter
        assert response is not None and meter is not None
        try:
            if start is not None:
                self.log.status = 200
                await send(start)
            out = forwarder.feed(b"".join(attempt.held))
            attempt.held.clear()
            if out:
                if meter.done and forwarder.error is None:
                    await self._last(send, redact(out), watch)
                else:
                    await send({"type": "http.response.body", "body": redact(out), "more_body": True})
                if self.log.first_byte_at is None:
                    self.log.first_byte_at = self.log.clock()
            if meter.done or forwarder.error is not None:
                return None
            read, feed, forward = response.read_chunk, meter.feed, forwarder.feed  # bound once: each chunk calls them
            # Until the stream's ending or an error event: each chunk's state is looked at once, after its feeds.
            while True:
                if meter.finish_arrived:
                    # The deadline only around a read that waits: one that returns at once cannot outlast it (the
                    # usage chunk and [DONE] are often in with the finish).
                    ready = response.read_ready()
                    if ready is not None:
                        chunk = ready
                    else:
                        try:
                            with Deadline(FINISH_LINGER_S):
                                chunk = await read()
                        except TimeoutError:
                            # The answer is complete; what never came was only [DONE].
                            chunk = b""
                else:
                    chunk = await read()
                if not chunk:
                    meter.end_of_stream()
                    out = forwarder.flush()
                    if out:
                        await send({"type": "http.response.body", "body": redact(out), "more_body": True})
                    return None
                feed(chunk)
                out = forward(chunk)
                if meter.done or forwarder.error is not None:
                    if out:
                        if forwarder.error is None:
                            await self._last(send, redact(out), watch)
                        else:
                            await send({"type": "http.response.body", "body": redact(out), "more_body": True})
                    return None
                if out:
                    await send({"type": "http.response.body", "body": redact(out), "more_body": True})
        except UpstreamError as exc:
            return exc
        except EventTooLarge as exc:
            return refused_stream(attempt, str(exc))
        except asyncio.CancelledError:
            self.runner.record(request, attempt, "client_cancelled", meter.finish(self.runner.counter))
            raise
        finally:
            response.close()

    def _last(self, send: Send, body: bytes, watch: DisconnectWatch) -> Awaitable[None]:
        """The send of ``body`` that holds the stream's ending, when nothing may follow: it ends the client's stream
        too (one write: uvicorn sends the chunk and the chunked body's end together). No coroutine of its own: the
        caller awaits ``send``'s."""
        watch.disarm()  # before the last frame: the server reports a completed response as a disconnect
        self._ended = True
        return send({"type": "http.response.body", "body": body, "more_body": False})

    def _note_break(self, broken: Attempt, outcome: Outcome, resumed: Attempt | None, breaks: int) -> None:
        """Tell and log a mid-answer break, and what followed it (headers are gone: events and logs only)."""
        events, model = self.runner.events, self.request.requested_model
        failed = broken.candidate
        name = failed.provider.name
        if resumed is None:
            events.stream_broke(model, failed.name, name, "failed")
            # Why, for whoever reads this after a lost request: what was left to ask, and what the budget allowed.
            budget = self.budget
            tried = [f"{s.deployment} {s.outcome}" for s in self.request.trace.samples[-4:]]
            logger.warning(
                "request %s: %s's stream ended mid-answer (%s) and no deployment could continue it "
                "(%s; left to ask: %s; attempts %d of %d%s; the last attempts: %s)",
                self.request.request_id,
                name,
                outcome,
                "the answer could be continued" if self._continuable else "the answer cannot be continued",
                ", ".join(self._offered) or "none",
                budget.used,
                budget.policy.max_attempts + budget.extra,
                ", deadline passed" if budget.remaining_s() <= 0 else "",
                ", ".join(tried) or "none",
            )
            return
        events.stream_broke(model, failed.name, name, "recovered")
        self.log.winner = resumed.candidate
        self.log.route = "recovered"
        continued = resumed.candidate
        events.committed(model, continued.name, continued.provider.name, "recovered")
        logger.info(
            "request %s: %s's stream ended mid-answer (%s); %s continues it (break %d)",
            self.request.request_id,
            name,
            outcome,
            continued.provider.name,
            breaks,
        )


def _metered(request: ProxyRequest, attempt: Attempt, counter: TokenCounter) -> UsageCount:
    """The gateway's count of ``attempt``'s usage: the prompt counted, the output as its meter read it."""

    def output_tokens() -> int | None:
        meter = attempt.meter
        return meter.finish(counter).output_tokens if meter is not None else None

    return CountedUsage(request, counter, output_tokens)


def _forwarder(
    request: ProxyRequest,
    attempt: Attempt,
    counter: TokenCounter,
    *,
    continuation: bool = False,
    said_tokens: int = 0,
) -> Forwarder:
    upstream = upstream_of(request, attempt.candidate)
    if upstream != request.endpoint:
        # Reached by translation: the upstream's events are rewritten in the client's API.
        args = (
            as_api(upstream),
            as_api(request.endpoint),
            request.body,
            request.shown_model or request.requested_model,
        )
        count = _metered(request, attempt, counter)
        if continuation:
            return StreamTranslator.continuing(*args, said_tokens, count)
        return StreamTranslator(*args, count, request.prompt_tokens)
    drop = injects_usage(request, attempt.candidate.provider)
    shown = None if continuation else request.shown_model
    return EventForwarder(request.dialect, continuation, drop, said_tokens, shown)  # by position (``EventForwarder``)
