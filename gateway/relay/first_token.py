"""Waiting until an attempt is safe to commit to: its status, then (for a stream) its first token, or (for a
whole answer) a body that can be one.

``AttemptRunner.open`` calls these once per attempt, between sending it and committing to it:
nothing has reached the client yet, so a failure here can still fall back to another deployment.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NoReturn

from gateway.dialects import dialect_for
from gateway.dialects.chat_events import FAILED_FINISHES
from gateway.errors import (
    CREDENTIALS_REFUSED,
    TIMED_OUT,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
    credentials_refusal,
    describe_error,
    describe_error_body,
    error_envelope,
    refused_credentials,
)
from gateway.events import GatewayEvents
from gateway.meter import StreamMeter
from gateway.relay.attempt import (
    CLIENT_FAULT_STATUSES,
    MODEL_FAULT_CODES,
    Attempt,
    ClientFault,
    is_request_fault,
    retry_after,
)
from gateway.relay.context import refused_input
from gateway.relay.echo import EchoedPrompt, echoes
from gateway.relay.ratelimit_headers import read_rate_limits
from gateway.relay.request import ProxyRequest
from gateway.samples import Endpoint
from gateway.sse import MAX_EVENT_BYTES, EventTooLarge
from gateway.types import Clock
from gateway.upstream import MAX_ERROR_BODY, redirect_words


def note_status(attempt: Attempt, wall_clock: Clock) -> bool:
    """Note the attempt's status and rate-limit headers; True for a status that is no answer, which
    ``status_error`` raises: an error, or a redirect (3xx; 1xx never gets here, ``gateway.http1`` skips it).

    Apart from ``status_error`` so that an answer's usual status costs no coroutine: nothing is awaited for it.
    """
    response = attempt.response
    assert response is not None
    attempt.status = response.status
    attempt.rate_limits = read_rate_limits(response.headers, wall_clock())
    return response.status >= 300


async def status_error(attempt: Attempt, redact: Callable[[bytes], bytes], wall_clock: Clock) -> NoReturn:
    """Raise for the error status ``note_status`` found: its body read (redacted), as a client fault or an error."""
    response = attempt.response
    assert response is not None
    provider = attempt.candidate.provider.name
    body = redact(await response.read_all(MAX_ERROR_BODY))
    response.close()
    content_type = response.headers.get("content-type", "application/json")
    refused = refused_input(attempt.candidate.deployment.name, response.status, body)
    if refused is not None:  # input this deployment does not take (llama.cpp's 500 for an image): others may
        raise refused
    message, code = describe_error_body(body)
    if response.status in CLIENT_FAULT_STATUSES and code not in MODEL_FAULT_CODES:
        raise ClientFault(response.status, body, content_type)
    if response.status < 400:
        message = redirect_words(response.headers)
    words = f"upstream returned {response.status}: {message}"
    if response.status == 404 and "model" in f"{message} {code}".lower():
        # The deployment's own model id (the operator's config) is unknown there: the provider's code
        # (``model_not_found``) would tell the client that *its* model does not exist. (A 404 for a path the
        # provider lacks keeps its words; either way the deployment cannot serve: ``gateway.routing.health``.)
        deployment = attempt.candidate.deployment
        words = f"deployment '{deployment.name}': the provider does not know its model '{deployment.model}' ({words})"
        code = None
    elif response.status in CREDENTIALS_REFUSED:  # the operator's key to the provider, not the client's to it
        words = refused_credentials(attempt.candidate.deployment.name, response.status)
        code = None
    wait = retry_after(response.headers.get("retry-after"), wall_clock())
    if response.status in TIMED_OUT:
        raise UpstreamTimeout(f"{provider}: {words}", provider=provider, status=response.status, retry_after_s=wait)
    raise UpstreamStatusError(
        f"{provider}: {words}", provider=provider, status=response.status, code=code, retry_after_s=wait
    )


async def await_first_token(
    request: ProxyRequest,
    attempt: Attempt,
    clock: Clock,
    api: Endpoint,
    redact: Callable[[bytes], bytes],
    events: GatewayEvents,
) -> None:
    """Read (and hold back) chunks until one carries output, ``[DONE]`` comes, or the stream ends.

    An event that is not JSON before (or with) the first output fails the attempt, as a broken stream, and is
    counted (``events.malformed_stream``): nothing has reached the client, so the next deployment is tried. The
    meter parses each of these events anyway; after the first output, events are not parsed on the way, so one that
    is not JSON is relayed as it came and found at the finish (``StreamReply``).

    An error event before any output is the provider's failure to start (overloaded, an
    internal error): nothing has reached the client, so the next deployment is tried. Only
    an error that blames the request (context length, content filter) is relayed as is; one that refuses the
    gateway's key is read as the 401 or 403 it stands for (``refused_in_band``). ``api``: the one the
    attempt was sent in (``upstream_of``), whose events the meter reads. A stream that ends before any event,
    its body a JSON error object instead, is read as that error (``error_answer``; ``redact``: its body may be
    relayed).
    """
    response = attempt.response
    assert response is not None
    attempt.echo = EchoedPrompt(request.body) if echoes(api, request.body) else None
    repeats = attempt.echo.repeats if attempt.echo is not None else None
    meter = attempt.meter = StreamMeter(clock, attempt.sent_at, dialect_for(api), repeats)
    held = attempt.held
    while meter.first_output_at is None and not meter.done:
        chunk = await response.read_chunk()
        if not chunk:
            meter.end_of_stream()
            if meter.first_output_at is None and not meter.done and not meter.finish_seen:
                error_answer(attempt, redact(b"".join(attempt.held)))
                name = attempt.candidate.provider.name
                # With its status: the provider's answer (an empty stream), not a failed connection to repeat.
                raise UpstreamUnavailable(
                    f"{name}: stream ended before any output", provider=name, status=attempt.status
                )
            break
        try:
            meter.feed(chunk)
        except EventTooLarge as exc:
            raise refused_stream(attempt, str(exc)) from None
        held.append(chunk)
        if meter.received_bytes > MAX_EVENT_BYTES:
            # Whole events, none with output (comments, a role chunk again and again): all held for the client.
            words = f"the stream sent {meter.received_bytes} bytes before any output (the limit is {MAX_EVENT_BYTES})"
            raise refused_stream(attempt, words)
    if meter.malformed:
        candidate = attempt.candidate
        events.malformed_stream(request.requested_model, candidate.name, candidate.provider.name)
        raise refused_stream(attempt, "an event before the first output is not JSON", "upstream_unreadable")
    if meter.first_error is None:
        return
    refused = credentials_refusal(meter.first_error)
    if refused is not None:
        raise refused_in_band(attempt, refused)
    if not is_request_fault(meter.first_error):
        name = attempt.candidate.provider.name
        message, code = describe_error(meter.first_error)
        raise UpstreamUnavailable(
            f"{name}: upstream error before the first token: {message}", provider=name, status=200, code=code
        )


def refused_in_band(attempt: Attempt, status: int) -> UpstreamStatusError:
    """The error of a refusal of the gateway's credentials sent inside a 200 (``credentials_refusal``): the
    ``status`` it stands for, raised as ``status_error`` raises that status (the deployment named, the provider's
    words and code left out), so that the router opens its circuit and the request falls back alike."""
    provider = attempt.candidate.provider.name
    words = refused_credentials(attempt.candidate.deployment.name, status, in_band=True)
    return UpstreamStatusError(f"{provider}: {words}", provider=provider, status=status)


def refused_stream(attempt: Attempt, words: str, code: str | None = None) -> UpstreamUnavailable:
    """The error of a stream the gateway stopped reading (for its size, ``gateway.sse.MAX_EVENT_BYTES``, or an
    event it cannot read, ``code`` ``upstream_unreadable``): a broken stream of the provider's, with its status (its
    answer, not a connection to repeat)."""
    name = attempt.candidate.provider.name
    return UpstreamUnavailable(f"{name}: {words}", provider=name, status=attempt.status, code=code)


_ERROR_MEMBER = re.compile(rb'"error"\s*[:,}]')
"""An ``error`` key, or the value ``"error"`` (``"type": "error"``): in a body that is an error object, always."""
_FAULT_CODES = frozenset(str(status) for status in CLIENT_FAULT_STATUSES)
"""An error object's ``code`` that names a request fault's status (vLLM's and some proxies' ``"code": 400``)."""


def error_answer(attempt: Attempt, body: bytes) -> None:
    """Raise for a success status whose body is a provider's error object, as the error status with that body is read.

    Some providers and proxies answer a failed request with 200 and ``{"error": {…}}`` (or Anthropic's
    ``{"type": "error", …}``), a stream request included. Relayed as an answer, the client got the error as a
    success, or a stream that "ended before any output" with the provider's words lost. An error that blames the
    request (``is_request_fault``: context length, an invalid request; or its own ``code`` saying 400, 413 or 422)
    is a ``ClientFault`` (relayed in the client's API shape, with that status, else 400); one that refuses the
    gateway's key (``credentials_refusal``) is read as that 401 or 403; any other is the provider's failure, and
    the next deployment is asked. Returns for any other body. Costs one ``find`` over a
    small body (an error object is never large), a regex and a parse only when it holds ``"error"``.
    """
    if len(body) > MAX_ERROR_BODY or body.find(b'"error"') < 0 or _ERROR_MEMBER.search(body) is None:
        return
    error = error_envelope(body)
    if error is None:
        return
    refused = credentials_refusal(error)
    status = _fault_status(error) if refused is None else None
    if status is not None:
        raise ClientFault(status, body, "application/json")
    if attempt.meter is not None:
        attempt.meter.first_error = error  # the stream's first word: recorded as the provider's error, not a break
    if refused is not None:
        raise refused_in_band(attempt, refused)
    name = attempt.candidate.provider.name
    message, code = describe_error(error)
    answered = attempt.status if attempt.status is not None else 200
    raise UpstreamUnavailable(
        f"{name}: upstream answered {answered} with an error: {message}", provider=name, status=answered, code=code
    )


def _fault_status(error: Any) -> int | None:
    """The status a request fault's error object stands for (its numeric ``code``, else 400); None for any other."""
    if not isinstance(error, dict):
        return None
    code = error.get("code")
    if isinstance(code, int | str) and str(code) in _FAULT_CODES:
        return int(code)
    return 400 if is_request_fault(error) else None


_JSON_OBJECT = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*\{")
"""How every whole answer of the gateway's APIs starts (a byte-order mark allowed: JSON readers skip it)."""


def json_object_like(body: bytes) -> bool:
    """Whether ``body`` starts as a JSON object: one anchored match over its first bytes, no parse."""
    return _JSON_OBJECT.match(body) is not None


def check_whole(attempt: Attempt) -> None:
    """Raise ``UpstreamUnavailable`` for a whole answer whose body is no JSON object (empty, a 204, an HTML page
    of a proxy or a wrong base_url): relayed, the client's SDK would get a string or fail to parse a success.
    Costs one anchored match over the body's first bytes per whole answer (no parse: the answer is read once,
    after it is sent); then a provider's error object (``error_answer``) or failed finish (``failed_finish``)."""
    if not json_object_like(attempt.body):
        response = attempt.response
        assert response is not None
        name = attempt.candidate.provider.name
        kind = response.headers.get("content-type") or "no content type"
        what = f"{len(attempt.body)} bytes of {kind}" if attempt.body else "an empty body"
        raise UpstreamUnavailable(
            f"{name}: upstream answered {response.status} with {what}, not a JSON answer",
            provider=name,
            status=response.status,
            code="upstream_unreadable",
        )
    error_answer(attempt, attempt.body)
    failed_finish(attempt, attempt.body)


_FAILED_FINISH = re.compile(rb'"finish_reason"\s*:\s*"(' + "|".join(sorted(FAILED_FINISHES)).encode() + rb')"')


def failed_finish(attempt: Attempt, body: bytes) -> None:
    """Raise ``UpstreamUnavailable`` for a whole chat answer whose ``finish_reason`` says the provider failed
    (``FAILED_FINISHES``: DeepSeek's ``insufficient_system_resource``): no answer to relay while another deployment
    may give one. One regex search over the body (a JSON string's quotes inside it are escaped: never matched)."""
    found = _FAILED_FINISH.search(body)
    if found is not None:
        name = attempt.candidate.provider.name
        raise UpstreamUnavailable(
            f"{name}: upstream ended its answer with finish_reason {found.group(1).decode()!r}",
            provider=name,
            status=attempt.status if attempt.status is not None else 200,
            code="upstream_failed",
        )
