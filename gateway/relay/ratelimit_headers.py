"""Reading a provider's rate-limit headers: what it has left, and when that resets.

OpenAI's (and most OpenAI-compatible providers') ``x-ratelimit-remaining-requests`` /
``-tokens`` and ``x-ratelimit-reset-requests`` / ``-tokens``; a reset is a duration (``1s``,
``6m0s``, ``20ms``, ``0.5``), or a date for Anthropic's ``anthropic-ratelimit-*-reset``. A header
that does not parse is ignored: a provider's odd header must never fail a request.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping

from gateway.routing.capacity import RateLimits

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def read_rate_limits(headers: Mapping[str, str], now_wall: float) -> RateLimits | None:
    """The budget ``headers`` report, or None when they report none (the common case: no allocation)."""
    remaining_requests = _count(headers, "x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
    remaining_tokens = _count(headers, "x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining")
    if remaining_requests is None and remaining_tokens is None:
        return None
    return RateLimits(
        remaining_requests=remaining_requests,
        remaining_tokens=remaining_tokens,
        reset_requests_s=_reset(headers, "x-ratelimit-reset-requests", "anthropic-ratelimit-requests-reset", now_wall),
        reset_tokens_s=_reset(headers, "x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset", now_wall),
    )


def _count(headers: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = headers.get(name)
        if value is not None:
            number = _number(value)
            return None if number is None else max(0, int(number))
    return None


def _number(text: str) -> float | None:
    """A finite number, or None: ``float`` also reads ``inf``, ``nan`` and ``1e400``, which count nothing (and
    ``int`` of infinity raises ``OverflowError``, which failed the answer that carried the header)."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _reset(headers: Mapping[str, str], openai: str, anthropic: str, now_wall: float) -> float | None:
    value = headers.get(openai)
    if value is not None:
        return parse_duration(value)
    value = headers.get(anthropic)
    if value is not None:
        try:
            when = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return max(0.0, when.timestamp() - now_wall)
    return None


def parse_duration(value: str) -> float | None:
    """``1s``, ``6m0s``, ``1h2m3.5s``, ``20ms``, or plain seconds; None for anything else."""
    text = value.strip().lower()
    number = _number(text)
    if number is not None:
        return max(0.0, number)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNITS[unit] for number, unit in parts)
