"""The learned concurrency limit and the rate-limit headers, as pure functions of what providers said."""

from __future__ import annotations

import logging

import pytest

from gateway.config import ProviderConfig
from gateway.relay.ratelimit_headers import parse_duration, read_rate_limits
from gateway.routing.capacity import BACKOFF_FLOOR, INITIAL_LIMIT, CapacityBoard, RateLimits
from gateway.routing.health import RouterState

OPEN = ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1")
CAPPED = ProviderConfig(name="q", base_url="http://127.0.0.1:9/v1", max_concurrency=8)
KEY = ("m", "p")


def test_a_ceiling_caps_the_limit_and_no_ceiling_starts_at_the_initial_limit() -> None:
    board = CapacityBoard()
    assert board.of(CAPPED, ("m", "q")).allowed == 8
    assert board.of(OPEN, KEY).allowed == int(INITIAL_LIMIT)
    for _ in range(50):
        board.of(CAPPED, ("m", "q")).succeeded(8)
    assert board.of(CAPPED, ("m", "q")).allowed == 8  # a ceiling, whatever the answers say


def test_growth_needs_the_limit_in_use() -> None:
    limit = CapacityBoard().of(OPEN, KEY)
    for _ in range(100):
        limit.succeeded(1)  # one at a time: nothing learned about 32 at once
    assert limit.allowed == int(INITIAL_LIMIT)
    limit.succeeded(20)
    assert limit.allowed == int(INITIAL_LIMIT) + 1  # slow start: +1 an answer until the first refusal


def test_a_refusal_backs_off_below_where_it_happened_once_per_round() -> None:
    limit = CapacityBoard().of(OPEN, KEY)
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
        KEY,
        ok=False,
        status=429,
        in_flight=3,
        limits=RateLimits(remaining_requests=0, reset_requests_s=2.5),
        retry_after_s=None,
        sent_at=9.9,
        now=10.0,
    )
    assert out and not board.has_room(OPEN, KEY, 0, 0, 12.4) and board.has_room(OPEN, KEY, 0, 0, 12.5)
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
    assert read_rate_limits({"x-ratelimit-remaining-requests": "inf"}, 0.0) is None  # no count, and no OverflowError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("20ms", 0.02),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("0.5", 0.5),
        ("soon", None),
        ("1x", None),
        ("inf", None),
        ("nan", None),
    ],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_limits_are_per_deployment_and_a_lone_refusal_stops_at_the_floor() -> None:
    board = CapacityBoard()
    for _ in range(3):
        board.observe(
            OPEN, ("a", "p"), ok=False, status=503, in_flight=1, limits=None, retry_after_s=None, sent_at=None, now=1.0
        )
    assert board.of(OPEN, ("a", "p")).allowed == int(BACKOFF_FLOOR)  # not 1: one in flight says nothing of load
    assert board.of(OPEN, ("b", "p")).allowed == int(INITIAL_LIMIT)  # model b on the same provider: untouched
    board.observe(
        OPEN, ("a", "p"), ok=False, status=429, in_flight=1, limits=None, retry_after_s=30.0, sent_at=2.0, now=2.0
    )
    assert not board.has_room(OPEN, ("a", "p"), 0, 0, 3.0) and board.has_room(OPEN, ("b", "p"), 0, 0, 3.0)
    assert board.provider_view(OPEN).allowed == int(BACKOFF_FLOOR + INITIAL_LIMIT)


def test_a_provider_ceiling_bounds_its_models_together() -> None:
    board = CapacityBoard()
    assert board.has_room(CAPPED, ("a", "q"), 0, 7, 0.0) and not board.has_room(CAPPED, ("b", "q"), 0, 8, 0.0)


def report(board: CapacityBoard, model: str, remaining: int, *, reset_s: float | None = None) -> bool:
    limits = RateLimits(remaining_requests=remaining, reset_requests_s=reset_s)
    return board.observe(
        OPEN,
        (model, "p"),
        ok=remaining > 0,
        status=None if remaining else 429,
        in_flight=1,
        limits=limits,
        retry_after_s=None,
        sent_at=None,
        now=10.0,
    )


def test_a_budget_is_shared_only_when_the_counts_say_so() -> None:
    apart = CapacityBoard()
    for remaining in (99, 98, 97):  # each model counts its own requests: OpenAI's per-model budgets
        report(apart, "a", remaining)
        report(apart, "b", remaining)
    assert report(apart, "a", 0, reset_s=20.0)
    assert not apart.budget("p").shared and apart.has_room(OPEN, ("b", "p"), 0, 0, 11.0)

    together = CapacityBoard()
    for model, remaining in (("a", 99), ("b", 98), ("a", 97)):  # a's count fell by b's request too
        report(together, model, remaining)
    assert together.budget("p").shared
    assert report(together, "a", 0, reset_s=20.0)
    assert not together.has_room(OPEN, ("b", "p"), 0, 0, 11.0)  # one budget: out for every model
    assert together.has_room(OPEN, ("b", "p"), 0, 0, 30.0)


def test_reaching_the_floor_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    board = CapacityBoard()
    with caplog.at_level(logging.WARNING, logger="gateway"):
        for now in (1.0, 2.0, 3.0):  # three back-offs, each after the last: the limit stays at its floor
            board.observe(
                OPEN, KEY, ok=False, status=429, in_flight=1, limits=None, retry_after_s=None, sent_at=now, now=now
            )
    lines = [r.getMessage() for r in caplog.records if "floor" in r.getMessage()]
    assert lines == ["deployment p of model m: concurrency limit backed off to its floor (4) after a 429"]


def test_a_refusal_backs_off_below_the_concurrency_it_was_sent_at_not_what_is_left_when_it_is_read() -> None:
    # Sent 21st at a provider that refuses above 20; by the time the gateway reads the 429, 12 others finished.
    board = CapacityBoard()
    board.observe(
        OPEN, KEY, ok=False, status=429, in_flight=9, limits=None, retry_after_s=None, sent_at=1.0, now=2.0,
        in_flight_at_send=21,
    )  # fmt: skip
    assert board.of(OPEN, KEY).allowed == int(20 * 0.9)
    late = CapacityBoard()  # without the count at send, the count now is all there is
    late.observe(OPEN, KEY, ok=False, status=429, in_flight=9, limits=None, retry_after_s=None, sent_at=1.0, now=2.0)
    assert late.of(OPEN, KEY).allowed == int(8 * 0.9)


def test_the_router_state_keeps_each_attempts_count_at_send_until_it_finishes() -> None:
    state = RouterState()
    for attempt in range(3):
        state.started("p", KEY, attempt)
    state.finished("p", KEY, 0)
    state.started("p", KEY, 3)
    assert state.sent_in_flight == {1: 2, 2: 3, 3: 3}
    for attempt in (1, 2, 3):
        state.finished("p", KEY, attempt)
    assert state.sent_in_flight == {} and state.deployment_in_flight[KEY] == 0
