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

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
MIN_VALUE = 1e-6
"""Values at or below this (zero included) are counted in one "zero" bucket, reported as 0."""
ZERO_BUCKET = -(2**31)


def bucket_of(value: float) -> int:
    """The bucket index of ``value``."""
    if value <= MIN_VALUE or math.isnan(value):
        return ZERO_BUCKET
    return math.ceil(math.log(value) / _LOG_GAMMA)


def value_of(bucket: int) -> float:
    """The value a bucket reports: within ``RELATIVE_ACCURACY`` of anything in it."""
    if bucket == ZERO_BUCKET:
        return 0.0
    return 2.0 * GAMMA**bucket / (GAMMA + 1.0)


class LogHistogram:
    """Counts per bucket. Not thread-safe; merge copies instead of sharing.

    Usage::

        h = LogHistogram()
        h.add(0.250)
        h.quantile(0.95)   # within 1% of the exact 95th percentile
    """

    __slots__ = ("counts", "count")

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts) if counts else {}
        self.count = sum(self.counts.values())

    def add(self, value: float, n: int = 1) -> None:
        bucket = bucket_of(value)
        self.counts[bucket] = self.counts.get(bucket, 0) + n
        self.count += n

    def merge(self, other: LogHistogram) -> None:
        for bucket, n in other.counts.items():
            self.counts[bucket] = self.counts.get(bucket, 0) + n
        self.count += other.count

    def copy(self) -> LogHistogram:
        return LogHistogram(self.counts)

    @classmethod
    def merged(cls, histograms: Iterable[LogHistogram]) -> LogHistogram:
        total = cls()
        for histogram in histograms:
            total.merge(histogram)
        return total

    def quantile(self, q: float) -> float | None:
        """The value at rank ``floor(q * (count - 1))`` of the sorted samples, within 1%; None if empty."""
        if self.count == 0:
            return None
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        rank = math.floor(q * (self.count - 1))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen > rank:
                return value_of(bucket)
        return value_of(max(self.counts))  # unreachable with consistent counts

    def mean(self) -> float | None:
        if self.count == 0:
            return None
        return sum(value_of(b) * n for b, n in self.counts.items()) / self.count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogHistogram) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"LogHistogram(count={self.count}, buckets={len(self.counts)})"
