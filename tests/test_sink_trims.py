"""The sinks' and the request glue's trims of branch ``sinks6`` against the code they replace.

Each one is held to the former form, copied or called here: the window's slice and total counted in one pass
(``count_buckets`` with ``also``) against ``count_buckets`` of each; the settlement's nano-dollars inline against
``to_nanos``; the usage tap's output tokens inline against ``Sample.billed_output_tokens``; the late booking made
positionally against ``LateBooking(...)``; the hang-up watch and the keep-alive given the running loop against
finding it themselves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from typing import Any

import pytest
import uvloop
from starlette.types import Message

from gateway.admission.access import AccessState, LateBooking, Ticket, late_booking
from gateway.admission.auth import ClientKey, KeyLimits
from gateway.admission.ratelimit import InMemoryRateLimiter
from gateway.admission.spending import InMemorySpendStore, Spender, SpendLedger
from gateway.admission.spending.ledger import bookings_of
from gateway.admission.spending.store import Booking
from gateway.admission.usage import TALLY, USAGE_TAP, UsageTally
from gateway.config import LimitsConfig
from gateway.dialects import dialect_for
from gateway.relay.keepalive import FirstByteKeepAlive
from gateway.samples import Sample
from gateway.stats.sketch import ZERO_BUCKET, LogHistogram, count_buckets
from tests.test_sink_shortcuts import _random_sample


def _histogram(h: LogHistogram) -> tuple[Any, ...]:
    """Everything a histogram holds, its sum's bits and its dict's order included."""
    return (list(h.counts.items()), h.count, float(h._sum).hex(), h._keys, h._memo)


def _histograms(histograms: dict[str, LogHistogram]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(key, _histogram(h)) for key, h in histograms.items()]


def _random_buckets(rng: random.Random) -> dict[str, int | None]:
    """A sample's buckets: some metrics missing, a few of None, the zero bucket, known and new buckets, any order."""
    metrics = ["ttft_s", "first_answer_s", "tokens_per_s", "e2e_s", "output_tokens", "cache_hit"]
    rng.shuffle(metrics)
    buckets: dict[str, int | None] = {}
    for metric in metrics[: rng.randrange(len(metrics) + 1)]:
        roll = rng.random()
        buckets[metric] = None if roll < 0.05 else ZERO_BUCKET if roll < 0.15 else rng.randrange(-300, 900)
    return buckets


@pytest.mark.parametrize("seed", range(12))
def test_count_buckets_in_two_counts_what_count_buckets_of_each_counted(seed: int) -> None:
    """A slice and a total (the total sometimes holding more, from earlier slices) counted by one pass and by
    ``count_buckets`` of each, 400 samples, quantiles read now and then (kept bucket orders updated in place, memos
    dropped): every count, sum to the bit, kept order, memo and dict order alike."""
    rng = random.Random(seed)
    mine: tuple[dict[str, LogHistogram], dict[str, LogHistogram]] = ({}, {})
    former: tuple[dict[str, LogHistogram], dict[str, LogHistogram]] = ({}, {})
    for step in range(400):
        if step % 100 == 0:  # a new slice: the total goes on
            mine[0].clear()
            former[0].clear()
        buckets: Any = _random_buckets(rng)  # None among them, as ``count_buckets`` allows
        count_buckets(mine[0], buckets, also=mine[1])
        count_buckets(former[0], buckets)
        count_buckets(former[1], buckets)
        if rng.random() < 0.2:
            for ours, theirs in zip(mine, former, strict=True):
                for key in ours:
                    q = rng.random()
                    assert ours[key].quantile(q) == theirs[key].quantile(q)
        for ours, theirs in zip(mine, former, strict=True):
            assert _histograms(ours) == _histograms(theirs)


def test_count_buckets_in_two_keeps_the_memo_of_neither() -> None:
    first, second = {"m": LogHistogram({3: 2})}, {"m": LogHistogram({3: 5, 9: 1})}
    for h in (*first.values(), *second.values()):
        h.quantile(0.5)
    count_buckets(first, {"m": 4}, also=second)
    assert first["m"]._memo is None and second["m"]._memo is None
    assert first["m"]._keys == [3, 4] and second["m"]._keys == [3, 4, 9]
    assert first["m"].quantile(0.99) == LogHistogram({3: 2, 4: 1}).quantile(0.99)


def _cost(rng: random.Random) -> float | None:
    """A sample's cost: missing, zero, negative zero, a tie at half a nano, tiny, ordinary, huge."""
    return rng.choice(
        (
            None,
            0.0,
            -0.0,
            2.5e-9,
            3.5e-9,
            1e-12,
            rng.uniform(0, 1e-6),
            rng.uniform(0, 0.5),
            rng.uniform(0, 1e6),
            -rng.uniform(0, 1e-3),
        )
    )


class _Heard:
    def __init__(self) -> None:
        self.bookings: list[Booking] = []

    def booked(self, key: str, team: str, bookings: Any) -> None:
        self.bookings.extend(bookings)

    def refused(self, scope: str, name: str) -> None:
        raise AssertionError("nothing is refused here")


def test_settle_now_books_each_cost_as_to_nanos_did() -> None:
    """3,000 settlements of 1–3 samples of random costs: the bookings heard are ``bookings_of``'s (its nanos by
    ``to_nanos``), field for field."""
    rng = random.Random(41)
    ledger = SpendLedger(InMemorySpendStore(), wall_clock=lambda: 1.8e9)
    heard = _Heard()
    ledger.listeners.append(heard)
    spender = Spender.of("k1", "key", "team", None, None)
    for _ in range(3000):
        samples = [dataclasses.replace(_random_sample(rng), cost_usd=_cost(rng)) for _ in range(rng.randrange(1, 4))]
        heard.bookings.clear()
        ledger.settle_now(spender, None, samples)
        assert heard.bookings == bookings_of(spender, samples)
        assert [type(b.cost) for b in heard.bookings] == [int] * len(samples)


def test_settle_now_refuses_what_to_nanos_refused() -> None:
    ledger = SpendLedger(InMemorySpendStore())
    spender = Spender.of("k1", "key", None, None, None)
    for cost, error in ((math.nan, ValueError), (math.inf, OverflowError)):
        sample = Sample("m", "d", "p", "chat", True, "ok", 0.0, cost_usd=cost)
        with pytest.raises(error):
            bookings_of(spender, [sample])
        with pytest.raises(error):
            ledger.settle_now(spender, None, [sample])


def test_the_usage_tap_adds_the_billed_output_tokens() -> None:
    """20,000 random samples tapped into tallies: the output tokens, attempts, prompt and samples as the former
    tap's ``billed_output_tokens`` summed them."""
    rng = random.Random(7)
    tally = UsageTally()
    token = TALLY.set(tally)
    try:
        expected_output, expected_prompt = 0, None
        for index in range(20_000):
            if index % 50 == 0:
                tally = UsageTally()
                TALLY.set(tally)
                expected_output, expected_prompt = 0, None
            sample = _random_sample(rng)
            USAGE_TAP.record(sample)
            expected_output += sample.billed_output_tokens or 0
            if sample.usage_prompt_tokens is not None:
                expected_prompt = sample.usage_prompt_tokens
            assert tally.output_tokens == expected_output
            assert type(tally.output_tokens) is int
            assert tally.prompt_tokens == expected_prompt
            assert tally.samples[-1] is sample and tally.attempts == len(tally.samples)
    finally:
        TALLY.reset(token)


def test_the_late_booking_made_positionally_is_the_class() -> None:
    state = AccessState(InMemoryRateLimiter(), SpendLedger(InMemorySpendStore()))
    key = ClientKey("k", "k1", KeyLimits.defaults(LimitsConfig()), team="t")
    spender = Spender.of("k1", "k", "t", None, None)
    made = late_booking(state, key, 7, spender, None)
    assert type(made) is LateBooking and made == LateBooking(state, key, 7, spender, None)
    assert (made.state, made.key, made.window, made.spender, made.hold) == (state, key, 7, spender, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.window = 8  # type: ignore[misc]
    assert state.in_flight.try_acquire("k1", 10, 10) is None
    ticket = Ticket(state, key, 3, 0, 0, spender)
    ticket.release()
    assert ticket.tally.late == LateBooking(state, key, 3, spender, None)


@pytest.mark.parametrize("given", [False, True])
def test_the_keep_alive_given_the_loop_sends_what_it_sends_finding_it(given: bool) -> None:
    """Started with the loop or without: nothing before the interval, then the 200 and a keep-alive per interval,
    nothing more once stopped."""

    async def main() -> tuple[int, list[Message], int]:
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        keeper = FirstByteKeepAlive(send, dialect_for("chat"), 0.02, [(b"x-request-id", b"r")])
        if given:
            keeper.start(asyncio.get_running_loop())
        else:
            keeper.start()
        await asyncio.sleep(0)
        before = len(sent)
        await asyncio.sleep(0.05)
        if not keeper.stop_waiting():
            await keeper.stop()
        stopped = list(sent)
        await asyncio.sleep(0.05)
        return before, stopped, len(sent)

    before, sent, after = uvloop.run(main())
    assert before == 0 and after == len(sent) >= 2
    assert sent[0]["type"] == "http.response.start" and (b"x-request-id", b"r") in sent[0]["headers"]
    assert all(
        m == {"type": "http.response.body", "body": dialect_for("chat").keep_alive, "more_body": True} for m in sent[1:]
    )
