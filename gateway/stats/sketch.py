"""A mergeable, log-bucketed histogram with bounded relative quantile error (DDSketch's idea).

Values fall into buckets whose bounds grow geometrically by ``gamma = (1 + a) / (1 - a)``;
bucket ``i`` holds values in ``(gamma**(i-1), gamma**i]`` and reports ``2 * gamma**i / (gamma + 1)``,
which is within ``a`` of every value in it. With ``a = 1%`` the quantiles of 1 ms .. 10 min and of
0.1 .. 100,000 tokens/s need a few hundred buckets at most, and merging two histograms (across
time slices or replicas) is adding counts bucket by bucket. The bucket indices are plain
integers, so a Redis hash can hold a histogram with one ``HINCRBY`` per sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TypeVar

K = TypeVar("K")

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
LOG_GAMMA = math.log(GAMMA)

MIN_VALUE = 1e-6
"""Values at or below this (zero included) are counted in one "zero" bucket, reported as 0."""
ZERO_BUCKET = -(2**31)


def bucket_of(value: float) -> int:
    """The bucket index of ``value``."""
    if value <= MIN_VALUE or math.isnan(value):
        return ZERO_BUCKET
    return math.ceil(math.log(value) / LOG_GAMMA)


_VALUES: dict[int, float] = {}


def value_of(bucket: int) -> float:
    """The value a bucket reports: within ``RELATIVE_ACCURACY`` of anything in it."""
    value = _VALUES.get(bucket)
    if value is None:
        # A few hundred distinct buckets ever occur: remember them instead of a power per call.
        value = 0.0 if bucket == ZERO_BUCKET else 2.0 * GAMMA**bucket / (GAMMA + 1.0)
        _VALUES[bucket] = value
    return value


def count_buckets(histograms: dict[K, LogHistogram], buckets: Mapping[K, int]) -> None:
    """One value of each bucket in ``buckets`` counted in ``histograms`` under its key (a histogram made where
    there is none): ``add_bucket(bucket)`` of each, inline, for the stores' every sample (a call per value and a
    ``value_of`` call each cost about as much as the counting). The same sums, in the same order, as ``add_bucket``."""
    values = _VALUES
    for key, bucket in buckets.items():
        histogram = histograms.get(key)
        if histogram is None:
            histogram = histograms[key] = LogHistogram()
        counts = histogram.counts
        counts[bucket] = counts.get(bucket, 0) + 1
        histogram.count += 1
        reported = values.get(bucket)
        if reported is None:
            reported = value_of(bucket)
        histogram._sum += reported
        if bucket != ZERO_BUCKET:
            histogram._inverse_sum += 1 / reported
        histogram._memo = None


class LogHistogram:
    """Counts per bucket. Not thread-safe; merge copies instead of sharing.

    Usage::

        h = LogHistogram()
        h.add(0.250)
        h.quantile(0.95)   # within 1% of the exact 95th percentile
    """

    __slots__ = ("counts", "count", "_sum", "_inverse_sum", "_memo")

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts) if counts else {}
        self.count = sum(self.counts.values())
        # Running sums of the reported values and of their reciprocals: the router asks for the
        # mean and the harmonic mean on every request, and these make both O(1).
        self._sum = sum(value_of(b) * n for b, n in self.counts.items())
        self._inverse_sum = sum(n / value_of(b) for b, n in self.counts.items() if b != ZERO_BUCKET)
        self._memo: dict[object, float | None] | None = None
        """Quantiles computed since the last change; only a histogram that changed is sorted again."""

    def add(self, value: float, n: int = 1) -> None:
        self.add_bucket(bucket_of(value), n)

    def add_bucket(self, bucket: int, n: int = 1) -> None:
        """Count ``n`` values of ``bucket`` (``bucket_of`` of them): one index for several histograms."""
        self.counts[bucket] = self.counts.get(bucket, 0) + n
        self.count += n
        reported = value_of(bucket)
        self._sum += reported * n
        if bucket != ZERO_BUCKET:
            self._inverse_sum += n / reported
        self._memo = None

    def merge(self, other: LogHistogram) -> None:
        for bucket, n in other.counts.items():
            self.counts[bucket] = self.counts.get(bucket, 0) + n
        self.count += other.count
        self._sum += other._sum
        self._inverse_sum += other._inverse_sum
        self._memo = None

    def subtract(self, other: LogHistogram) -> None:
        """Remove ``other``'s counts (it must have been merged in): how a window drops an old slice."""
        for bucket, n in other.counts.items():
            left = self.counts.get(bucket, 0) - n
            if left > 0:
                self.counts[bucket] = left
            else:
                self.counts.pop(bucket, None)
        self.count -= other.count
        if self.count > 0:
            self._sum -= other._sum
            self._inverse_sum -= other._inverse_sum
        else:
            self._sum = self._inverse_sum = 0.0  # no rounding residue on an empty histogram
        self._memo = None

    def copy(self) -> LogHistogram:
        return LogHistogram(self.counts)

    @classmethod
    def merged(cls, histograms: Iterable[LogHistogram]) -> LogHistogram:
        total = cls()
        for histogram in histograms:
            total.merge(histogram)
        return total

    def _cached(self) -> dict[object, float | None]:
        if self._memo is None:
            self._memo = {}
        return self._memo

    def _sorted(self) -> list[tuple[int, int]]:
        """(bucket, cumulative count) in bucket order; computed once per change."""
        memo = self._cached()
        key = "sorted"
        cumulative: list[tuple[int, int]] | None = memo.get(key)  # type: ignore[assignment]
        if cumulative is None:
            seen = 0
            cumulative = []
            for bucket in sorted(self.counts):
                seen += self.counts[bucket]
                cumulative.append((bucket, seen))
            memo[key] = cumulative  # type: ignore[assignment]
        return cumulative

    def quantile(self, q: float) -> float | None:
        """The value at rank ``floor(q * (count - 1))`` of the sorted samples, within 1%; None if empty."""
        if self.count == 0:
            return None
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        if q == 0.0:
            return value_of(min(self.counts))
        if q == 1.0:
            return value_of(max(self.counts))
        memo = self._cached()
        if q in memo:
            return memo[q]
        rank = math.floor(q * (self.count - 1))
        result = None
        for bucket, seen in self._sorted():
            if seen > rank:
                result = value_of(bucket)
                break
        memo[q] = result
        return result

    def mean(self) -> float | None:
        return self._sum / self.count if self.count > 0 else None

    def total(self) -> float:
        """The sum of the values counted (each as its bucket reports it)."""
        return self._sum

    def harmonic_mean(self) -> float | None:
        """count ÷ Σ(n / value): the mean of a rate whose reciprocal (e.g. seconds per token) is what adds up."""
        return self.count / self._inverse_sum if self.count > 0 and self._inverse_sum > 0 else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogHistogram) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"LogHistogram(count={self.count}, buckets={len(self.counts)})"
