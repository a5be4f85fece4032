"""The access line's numbers: each measured figure rounded as ``round(value, digits)`` rounds it, bit for bit.

Every line rounds five to eight floats (its times to the microsecond, its speed to two places, each attempt's cost
and their sum to ten). ``round(value, digits)`` gets the decimal digits right by making them (CPython's correctly
rounded ``dtoa``) and reads the result back (``strtod``): a fraction of a microsecond each, more than the rest of
the line's arithmetic. ``rounded`` takes the short way wherever it gives the same float, and ``round`` elsewhere.

The short way: ``scaled = |value| * 10**digits`` is the exact product rounded once, and rounding is monotonic:
with ``w`` its whole part, ``w + 0.5`` a float (``scaled`` under ``2 ** 52``), a fraction below one half means the
exact product is below ``w + 0.5``, above one half that it is above. The exact product then rounds to the same whole
number ``n`` as ``scaled`` does, and ``n / 10**digits`` (both exact, the quotient rounded once by IEEE division) is
the float nearest to the rounded decimal: what ``round`` reads back. A fraction of exactly one half (a tie, or a
product that rounded onto one), a value too large for ``n`` to be exact, NaN or infinity go to ``round``. The sign
is put back after (``round`` is symmetric), a zero keeping the value's (``round(-1e-9, 6)`` is ``-0.0``).

Compiled with mypyc (``gateway.native.MODULES``): there the short way is a few machine instructions (as Python it
is no faster than ``round``, and gives the same floats). The line's fields are worked out here too
(``encoded_line``), so that their arithmetic and each ``rounded`` call run compiled, and the stamp's text
(``Stamps``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gateway.access_format import EncodedAttemptCost, EncodedLine

SCALES: tuple[float, ...] = tuple(10.0**digits for digits in range(16))
"""``10.0 ** digits``: exact in a float up to 22 digits; the line rounds to 2, 6 and 10."""
LIMIT = 2.0**52
"""Below this a scaled value's whole part, the half after it and the whole number after that are floats."""

MILLIS: tuple[str, ...] = tuple(f".{millis:03d}+00:00" for millis in range(1000))
"""A stamp's tail after its second, by its milliseconds: joined to the second's text, not formatted per line."""

COMPILED = not __file__.endswith(".py")
"""Whether this module runs compiled (then ``rounded`` is the faster)."""


_ROUND: Any = round
"""``round``, called with the value as it came (typed ``Any``: compiled code would otherwise make an int a float)."""


def rounded(value: object, digits: int) -> object:
    """``round(value, digits)``: for a float and ``0 <= digits < 16`` the same float (sign of zero included); any
    other value (an int: ``round`` keeps it an int) or number of digits goes to ``round`` itself."""
    if type(value) is not float or not 0 <= digits < 16:
        return _ROUND(value, digits)
    scale = SCALES[digits]
    negative = value < 0.0
    scaled = -value * scale if negative else value * scale
    if scaled < LIMIT:  # False for NaN and infinity
        whole = float(int(scaled))  # ``floor``: ``scaled`` is not negative
        fraction = scaled - whole  # exact: ``whole`` is within a factor of two of ``scaled``, or zero
        if fraction > 0.5:
            whole += 1.0
        elif fraction == 0.5:
            return _ROUND(value, digits)  # a tie, or a product that rounded onto one: ``round`` knows which way
        if whole == 0.0:
            return value * 0.0  # ``round``'s zero keeps the value's sign
        result = whole / scale
        return -result if negative else result
    return _ROUND(value, digits)


class Stamps:
    """``datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")`` of the line's wall-clock times.

    The second's text is made once per second (``datetime``); the milliseconds come from the fraction as ``datetime``
    takes it: its microseconds rounded half to even, a carry into the next second, then truncated to milliseconds.
    """

    def __init__(self) -> None:
        self.second: tuple[int, str] = (-1, "")
        """The last whole second and its ISO form up to the seconds (one attribute, replaced whole: a batch written
        at exit, from another thread, reads a matching pair)."""

    def text(self, at: float) -> str:
        if not at >= 0.0 or at >= LIMIT:  # before 1970 (never here), NaN, or too far for the short way
            return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        whole = float(int(at))  # ``math.modf``'s parts: ``at`` is not negative
        scaled = (at - whole) * 1e6
        micros = int(scaled)  # ``round(scaled)``: half to even
        rest = scaled - micros
        if rest > 0.5 or rest == 0.5 and micros % 2 == 1:
            micros += 1
        second = int(whole)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        cached = self.second
        if second != cached[0]:
            cached = self.second = (second, datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6])
        return cached[1] + MILLIS[micros // 1000]  # ``f"{...}.{millis:03d}+00:00"``, the text made once


def encoded_line(taken: tuple[Any, ...], stamp: str) -> EncodedLine:
    """The line's fields, worked out from ``AccessLog._taken``'s tuple (``stamp``: its time's text). Numbers only for
    what was measured; None (null) for what was not. Here, compiled where the build is used, so that the line's
    arithmetic and its ``rounded`` calls run as machine code (every value read as ``Any``: compiled code would make an
    int a float where a field declares one, and the line must keep what it was given)."""
    (at, request_id, endpoint, upstream, omitted, route, key, team, keepalives, status, duration, overhead,
     winner, samples, said, counted, model, stream, queue_wait, timings, _) = taken  # fmt: skip
    prompt: Any = None
    output: Any = None
    usage_source: Any = None
    ttft: Any = None
    first: Any = None
    speed: Any = None
    outcome: Any = None
    validity: Any = None
    provider: Any = None
    deployment: Any = None
    if winner is not None:
        prompt = winner.usage_prompt_tokens
        # Where the split came from: the provider's usage, or the gateway's pinned tokenizer (no usage came, or
        # a recovery's earlier parts were counted by it and moved from the continuation's prompt to the output).
        usage_source = "provider" if prompt is not None and not said else "gateway_tokenizer"
        if prompt is None:
            prompt = counted if counted is not None else winner.prompt_tokens_estimate
        # After a recovery: the whole answer's tokens, the original prompt once (the prefill is output).
        prompt = max(0, prompt - said) if prompt is not None else None
        tokens: Any = winner.output_tokens
        output = tokens + said if tokens is not None else None
        ttft, first, speed = winner.ttft_s, winner.first_answer_s, winner.tokens_per_s
        ttft = None if ttft is None else rounded(ttft, 6)
        first = None if first is None else rounded(first, 6)
        speed = None if speed is None else rounded(speed, 2)
        # The answer's verdict (gateway.quality): "valid", or why not; null when none was judged.
        outcome, validity, provider, deployment = winner.outcome, winner.validity, winner.provider, winner.deployment
    elif status is None:
        outcome = "client_cancelled"  # no attempt, no response started: the client left first (e.g. while queued)
    costs: list[Any] = []
    attempt_costs: list[Any] = []
    for sample in samples:
        cost: Any = sample.cost_usd
        if cost is not None:
            costs.append(cost)
            cost = rounded(cost, 10)
        attempt_costs.append(
            EncodedAttemptCost(sample.deployment, sample.provider, sample.outcome, sample.validity, cost)
        )
    # ``provider_timings``: the provider's own figures, beside the gateway's; never used for routing.
    return EncodedLine(
        stamp, request_id, endpoint, endpoint, upstream, omitted, model, stream, status, outcome,
        validity, provider, deployment, len(samples), route, ttft, first, speed, prompt, output, usage_source,
        rounded(sum(costs), 10) if costs else None, key, team, attempt_costs,
        None if queue_wait is None else rounded(queue_wait, 6), rounded(duration, 6),
        None if overhead is None else rounded(overhead, 6), keepalives, timings,
    )  # fmt: skip


__all__ = ["COMPILED", "Stamps", "encoded_line", "rounded"]
