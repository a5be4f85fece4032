"""``access_numbers.rounded`` is ``round(value, digits)``, bit for bit (the access line's numbers).

Run as Python here and compiled in ``tests/test_native.py``'s ``COMPILED_SUITE``.
"""

from __future__ import annotations

import math
import random
import struct
from datetime import UTC, datetime

from gateway.access_format import ENCODE, EncodedAttemptCost, EncodedLine, TakenFacts, entry_of, log_line
from gateway.access_numbers import Stamps, rounded
from gateway.accesslog import AccessLog
from gateway.metrics.series import Metrics
from tests.test_sink_frames import _record

DIGITS = (0, 1, 2, 3, 6, 9, 10, 15, 16, 20, -1)


def _same(a: object, b: object) -> bool:
    """The same type and, for floats, the same bits (NaN's, and the sign of a zero)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return a == b


def _values(rng: random.Random) -> list[float]:
    """Random floats of every size the line sees and more, and the hard ones: ties, near-ties, zeros."""
    values = [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 2.0**52, 2.0**53 + 2, 1e300, -1e-300]
    for _ in range(4000):
        values.append(10.0 ** rng.uniform(-14, 8) * rng.choice((1.0, -1.0)))
        values.append(rng.random())
        values.append(rng.randrange(1, 1 << 20) / 128.0)  # ties in binary: k/128 * 1e6 ends in .5
        values.append(rng.randrange(1, 10**9) / 1e6 + 5e-7)  # near a half at six places
        values.append((rng.randrange(1, 10**7) + 0.5) / 100.0)  # near a half at two places
        values.append(rng.randrange(0, 10**12) * 1e-10 + rng.choice((5e-11, -5e-11, 0.0)))
        exact = rng.randrange(1, 10**9) * 1e-6
        values.append(math.nextafter(exact, math.inf))
        values.append(math.nextafter(exact, -math.inf))
    return values


def test_every_float_rounds_to_the_same_float_as_round() -> None:
    rng = random.Random(41)
    values = _values(rng)
    for digits in DIGITS:
        for value in values:
            expected = round(value, digits)
            got = rounded(value, digits)
            assert _same(got, expected), (value, digits, got, expected)


def test_an_int_stays_an_int_as_round_keeps_it() -> None:
    for value in (0, 5, -7, 10**20, True):
        for digits in (2, 6, 10):
            assert _same(rounded(value, digits), round(value, digits))


def test_a_float_subclass_gets_rounds_own_answer() -> None:
    class Seconds(float):
        pass

    value = Seconds(0.1234567891)
    assert _same(rounded(value, 6), round(value, 6))


def test_the_line_figures_round_alike() -> None:
    """The kinds of figures a line holds: clock differences, speeds, costs and their sums."""
    rng = random.Random(7)
    for _ in range(50_000):
        start = rng.uniform(0, 1e6)
        duration = (start + rng.expovariate(3.0)) - start
        speed = rng.expovariate(1 / 300)
        costs = [rng.randrange(0, 10**6) * 1e-9 * rng.random() for _ in range(rng.randrange(1, 4))]
        for value, digits in ((duration, 6), (speed, 2), (sum(costs), 10), *((c, 10) for c in costs)):
            assert _same(rounded(value, digits), round(value, digits)), (value, digits)


def test_stamps_write_what_datetime_writes() -> None:
    """Random times, times a hair either side of a millisecond and of a second (the carry), the epoch, and before it."""
    rng = random.Random(3)
    stamps = Stamps()
    values = [0.0, 0.0005, 0.9995, 0.9999995, 1.0000005, 1e-7, -1.5, -0.0004, 1_700_000_000.9999995, 1_700_000_000.0]
    for _ in range(30_000):
        values.append(rng.uniform(0, 4e9))
        second = rng.randrange(0, 4 * 10**9)
        values.append(second + rng.randrange(0, 10**6) / 1e6 + rng.choice((0.0, 5e-7, -5e-7, 4.9e-7)))
        values.append(1_700_000_000 + rng.random() * 3)  # the second's text kept, then replaced
    for value in values:
        assert stamps.text(value) == datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds"), value


def test_the_line_is_the_former_line_with_the_fast_numbers() -> None:
    """``AccessLog._made`` (``encoded_line``, with ``rounded`` and ``Stamps``: what a compiled build runs) against
    the former ``AccessLog._encoded`` (``round`` and ``AccessLog.timestamp``, copied below), on 3,000 random records of
    every branch, at random wall-clock times, byte for byte; and ``AccessLog.entry``'s dict likewise."""
    rng = random.Random(11)
    metrics = Metrics(process_metrics=False)
    fast, former = AccessLog(metrics), AccessLog(metrics)
    fast._stamp = Stamps().text
    lines = 0
    for index in range(3000):
        record = _record(rng, index)
        duration = record.clock() - record.received_at
        taken = fast._taken(
            record, duration, record.overhead_s(), record.winner(), record.status, record.upstream_api()
        )
        taken = (rng.uniform(1.6e9, 1.9e9), *taken[1:])
        new = fast._made(taken)
        line = _former_encoded(former, taken)
        old = ENCODE(line).decode() if taken[-1] is None else log_line(former._with_bodies(entry_of(line), taken))
        assert new == old
        assert fast._encoded(taken) == line
        lines += '"cost_usd":0.' in new and '"duration_s":' in new
    assert lines > 1000


def _former_encoded(log: AccessLog, taken: TakenFacts) -> EncodedLine:
    """``AccessLog._encoded`` as it was before ``encoded_line``: ``round`` and ``AccessLog.timestamp``."""
    (at, request_id, endpoint, upstream, omitted, route, key, team, keepalives, status, duration, overhead,
     winner, samples, said, counted, model, stream, queue_wait, timings, _) = taken  # fmt: skip
    rounded = round
    prompt = output = usage_source = ttft = first = speed = outcome = validity = provider = deployment = None
    if winner is not None:
        prompt = winner.usage_prompt_tokens
        usage_source = "provider" if prompt is not None and not said else "gateway_tokenizer"
        if prompt is None:
            prompt = counted if counted is not None else winner.prompt_tokens_estimate
        prompt = max(0, prompt - said) if prompt is not None else None
        output = winner.output_tokens + said if winner.output_tokens is not None else None
        ttft, first, speed = winner.ttft_s, winner.first_answer_s, winner.tokens_per_s
        ttft = None if ttft is None else rounded(ttft, 6)
        first = None if first is None else rounded(first, 6)
        speed = None if speed is None else rounded(speed, 2)
        outcome, validity, provider, deployment = (
            winner.outcome,
            winner.validity,
            winner.provider,
            winner.deployment,
        )
    elif status is None:
        outcome = "client_cancelled"
    costs = []
    attempt_costs = []
    for sample in samples:
        cost = sample.cost_usd
        if cost is not None:
            costs.append(cost)
            cost = rounded(cost, 10)
        attempt_costs.append(
            EncodedAttemptCost(sample.deployment, sample.provider, sample.outcome, sample.validity, cost)
        )
    return EncodedLine(
        log.timestamp(at), request_id, endpoint, endpoint, upstream, omitted, model, stream, status, outcome,
        validity, provider, deployment, len(samples), route, ttft, first, speed, prompt, output, usage_source,
        rounded(sum(costs), 10) if costs else None, key, team, attempt_costs,
        None if queue_wait is None else rounded(queue_wait, 6), rounded(duration, 6),
        None if overhead is None else rounded(overhead, 6), keepalives, timings,
    )  # fmt: skip
