"""``note_status`` then ``status_error`` against the one coroutine they replace (``check_status``, copied below).

For every status the attempt is left with the same status and rate limits, the same exception (type, message,
fields) is raised, the body is read and the response closed exactly when the old one did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.errors import UpstreamStatusError, describe_error_body
from gateway.relay.attempt import CLIENT_FAULT_STATUSES, ClientFault, retry_after
from gateway.relay.first_token import note_status, status_error
from gateway.relay.ratelimit_headers import read_rate_limits
from gateway.types import Clock
from gateway.upstream import MAX_ERROR_BODY


async def check_status(attempt: Any, redact: Callable[[bytes], bytes], wall_clock: Clock) -> None:
    """The coroutine as it was: note the status and rate-limit headers; raise for an error status."""
    response = attempt.response
    assert response is not None
    attempt.status = response.status
    attempt.rate_limits = read_rate_limits(response.headers, wall_clock())
    if response.status < 400:
        return
    provider = attempt.candidate.provider.name
    body = redact(await response.read_all(MAX_ERROR_BODY))
    response.close()
    content_type = response.headers.get("content-type", "application/json")
    if response.status in CLIENT_FAULT_STATUSES:
        raise ClientFault(response.status, body, content_type)
    message, code = describe_error_body(body)
    raise UpstreamStatusError(
        f"{provider}: upstream returned {response.status}: {message}",
        provider=provider,
        status=response.status,
        code=code,
        retry_after_s=retry_after(response.headers.get("retry-after"), wall_clock()),
    )


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.calls: list[str] = []

    async def read_all(self, limit: int | None = None) -> bytes:
        self.calls.append(f"read_all {limit}")
        return self.body

    def close(self) -> None:
        self.calls.append("close")


def _attempt(response: Response) -> Any:
    return SimpleNamespace(
        response=response,
        status=None,
        rate_limits=None,
        candidate=SimpleNamespace(provider=SimpleNamespace(name="p"), deployment=SimpleNamespace(name="d")),
    )


def _raised(exc: BaseException | None) -> Any:
    if exc is None:
        return None
    return type(exc).__name__, str(exc), sorted((k, repr(v)) for k, v in vars(exc).items())


async def _old(attempt: Any) -> BaseException | None:
    try:
        await check_status(attempt, lambda b: b.replace(b"secret", b"***"), lambda: 1_700_000_000.0)
    except Exception as exc:  # noqa: BLE001 - the exception is what is compared
        return exc
    return None


async def _new(attempt: Any) -> BaseException | None:
    try:
        if note_status(attempt, lambda: 1_700_000_000.0):
            await status_error(attempt, lambda b: b.replace(b"secret", b"***"), lambda: 1_700_000_000.0)
    except Exception as exc:  # noqa: BLE001 - the exception is what is compared
        return exc
    return None


LIMITS = {"x-ratelimit-remaining-requests": "7", "x-ratelimit-reset-requests": "2s"}
ERROR = b'{"error": {"message": "overloaded secret", "code": "overloaded"}}'


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        (200, {"content-type": "text/event-stream"}, b""),
        (200, {"content-type": "text/event-stream", **LIMITS}, b""),
        (299, {}, b""),
        (400, {"content-type": "application/json"}, b'{"error": {"message": "bad secret"}}'),
        (413, {}, b"too large"),
        (422, {"content-type": "text/plain"}, b"no"),
        (429, {"retry-after": "3", **LIMITS}, ERROR),
        (500, {}, ERROR),
        (503, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"not json"),
    ],
)
def test_same_as_check_status(status: int, headers: dict[str, str], body: bytes) -> None:
    old_response, new_response = Response(status, headers, body), Response(status, headers, body)
    old_attempt, new_attempt = _attempt(old_response), _attempt(new_response)
    old = asyncio.run(_old(old_attempt))
    new = asyncio.run(_new(new_attempt))
    assert _raised(new) == _raised(old)
    assert (new_attempt.status, repr(new_attempt.rate_limits)) == (old_attempt.status, repr(old_attempt.rate_limits))
    assert new_response.calls == old_response.calls
    assert (old is None) == (status < 400)


@pytest.mark.parametrize("status", [300, 301, 307, 308, 399])
def test_a_redirect_is_no_answer_and_is_never_followed(status: int) -> None:
    # check_status relayed a 3xx as the answer: the client got the provider's redirect (and could follow it).
    response = Response(status, {"location": "https://other.example/v1/chat?token=secret"}, b"")
    raised = asyncio.run(_new(_attempt(response)))
    assert isinstance(raised, UpstreamStatusError) and raised.upstream_status == status
    assert str(raised) == (
        f"p: upstream returned {status}: a redirect to https://other.example/v1/chat, not followed (check its base_url)"
    )
    assert response.calls == [f"read_all {MAX_ERROR_BODY}", "close"]
