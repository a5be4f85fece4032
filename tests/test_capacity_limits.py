"""The learned concurrency limit and the rate-limit headers, as pure functions of what providers said."""

from __future__ import annotations

import pytest

from gateway.config import ProviderConfig
from gateway.relay.ratelimit_headers import parse_duration, read_rate_limits
from gateway.routing.capacity import INITIAL_LIMIT, CapacityBoard, RateLimits

OPEN = ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1")
CAPPED = ProviderConfig(name="q", base_url="http://127.0.0.1:9/v1", max_concurrency=8)


def test_a_ceiling_caps_the_limit_and_no_ceiling_starts_at_the_initial_limit() -> None:
    board = CapacityBoard()
    assert board.of(CAPPED).allowed == 8
    assert board.of(OPEN).allowed == int(INITIAL_LIMIT)
    for _ in range(50):
        board.of(CAPPED).succeeded(8)
    assert board.of(CAPPED).allowed == 8  # a ceiling, whatever the answers say


def test_growth_needs_the_limit_in_use() -> None:
    limit = CapacityBoard().of(OPEN)
    for _ in range(100):
        limit.succeeded(1)  # one at a time: nothing learned about 32 at once
    assert limit.allowed == int(INITIAL_LIMIT)
    limit.succeeded(20)
    assert limit.allowed == int(INITIAL_LIMIT) + 1  # slow start: +1 an answer until the first refusal


def test_a_refusal_backs_off_below_where_it_happened_once_per_round() -> None:
    limit = CapacityBoard().of(OPEN)
    limit.limit = 60
    limit.overloaded(41, sent_at=1.0, now=1.2)
    assert limit.allowed == 36  # just under the 40 it took, times 0.9
    limit.overloaded(38, sent_at=1.1, now=1.3)  # sent before that back-off: already answered
    assert limit.allowed == 36 and limit.refusals == 2
    limit.overloaded(37, sent_at=1.25, now=1.5)
    assert limit.allowed == 32
    before = limit.limit
    limit.succeeded(30)
    assert limit.limit == pytest.approx(before + 1 / before)  # after a back-off: additive


def test_a_provider_out_of_budget_is_blocked_until_its_reset() -> None:
    board = CapacityBoard()
    out = board.observe(
        OPEN,
        ok=False,
        status=429,
        in_flight=3,
        limits=RateLimits(remaining_requests=0, reset_requests_s=2.5),
        retry_after_s=None,
        sent_at=9.9,
        now=10.0,
    )
    limit = board.of(OPEN)
    assert out and not limit.has_room(0, 12.4) and limit.has_room(0, 12.5)
    assert board.next_change(10.0) == 12.5


def test_rate_limit_headers() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    limits = read_rate_limits(headers, 0.0)
    assert limits == RateLimits(59, 0, 1.0, 360.0)
    assert limits is not None and limits.exhausted_for_s == 360.0 and limits.has_budget
    assert read_rate_limits({}, 0.0) is None
    anthropic = {
        "anthropic-ratelimit-requests-remaining": "5",
        "anthropic-ratelimit-requests-reset": "1970-01-01T00:00:30Z",
    }
    assert read_rate_limits(anthropic, 10.0) == RateLimits(5, None, 20.0, None)
    assert read_rate_limits({"x-ratelimit-remaining-requests": "many"}, 0.0) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("20ms", 0.02), ("6m0s", 360.0), ("1h2m3.5s", 3723.5), ("0.5", 0.5), ("soon", None), ("1x", None)],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)
