"""A mergeable, log-bucketed histogram with bounded relative quantile error (DDSketch's idea).

Values fall into buckets whose bounds grow geometrically by ``gamma = (1 + a) / (1 - a)``;
bucket ``i`` holds values in ``(gamma**(i-1), gamma**i]`` and reports ``2 * gamma**i / (gamma + 1)``,
which is within ``a`` of every value in it. With ``a = 1%`` the quantiles of 1 ms .. 10 min and of
0.1 .. 100,000 tokens/s need a few hundred buckets at most, and merging two histograms (across
time slices or replicas) is adding counts bucket by bucket. The bucket indices are plain
integers, so a Redis hash can hold a histogram with one ``HINCRBY`` per sample.

The router reads quantiles of the window's totals on every plan, and every sample changes one of them. So a
histogram keeps its buckets in order once a quantile asked for them (a sample of a new bucket puts it in its
place; a merge or a subtraction that adds or empties buckets has them sorted again at the next read), and a
quantile after a change is the cumulative counts summed in C (``itertools.accumulate``) and a ``bisect`` for
the rank, not a sort and a walk in Python.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from typing import Any, Final, TypeVar

K = TypeVar("K")

RELATIVE_ACCURACY: Final = 0.01
GAMMA: Final = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
LOG_GAMMA: Final = math.log(GAMMA)

MIN_VALUE: Final = 1e-6
"""Values at or below this (zero included) are counted in one "zero" bucket, reported as 0."""
ZERO_BUCKET: Final = -(2**31)


_Memo = tuple[list[int], list[int], dict[float, float | None]]
"""A histogram's buckets in order, its counts summed in that order, and the quantiles answered from them."""


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


def count_buckets(
    histograms: dict[K, LogHistogram],
    buckets: Mapping[K, int | None],
    keys: Sequence[K] | None = None,
    also: dict[K, LogHistogram] | None = None,
) -> None:
    """One value of each bucket in ``buckets`` (only those under ``keys``, in their order, when given) counted in
    ``histograms`` under its key (a histogram made where there is none), and in ``also`` too when given (the window
    counts every sample in its slice and in its total: each bucket's key, index and reported value read once for
    both, which never share a histogram): ``add_bucket(bucket)`` of each, inline, for the stores' every sample (a call
    per value and a ``value_of`` call each cost about as much as the counting). The same sums, in the same order, as
    ``add_bucket``."""
    # Typed ``Any`` where compiled code (``gateway.native``) would otherwise unbox each bucket index, reported value
    # and count and box it again for every dict operation (an int object made per use past 256): kept as the objects
    # they are, as Python keeps them. ``buckets`` is a dict wherever the stores call this.
    given: dict[Any, Any] = buckets if isinstance(buckets, dict) else dict(buckets)
    values: dict[Any, Any] = _VALUES
    tables: tuple[dict[K, LogHistogram], ...] = (histograms,) if also is None else (histograms, also)
    for key in given if keys is None else keys:
        bucket: Any = given.get(key)
        if bucket is None:
            continue
        found: float | None = values.get(bucket)
        value: float = value_of(bucket) if found is None else found  # a float: added to each ``_sum`` unboxed
        for table in tables:
            histogram = table.get(key)
            if histogram is None:
                histogram = table[key] = LogHistogram()
            counts: dict[Any, Any] = histogram.counts
            old: Any = counts.get(bucket)
            if old is None:
                counts[bucket] = 1
                if histogram._keys is not None:
                    insort(histogram._keys, bucket)
            else:
                counts[bucket] = old + 1
            histogram.count += 1
            histogram._sum += value
            histogram._memo = None


class LogHistogram:
    """Counts per bucket. Not thread-safe; merge copies instead of sharing.

    Usage::

        h = LogHistogram()
        h.add(0.250)
        h.quantile(0.95)   # within 1% of the exact 95th percentile

    Invariant: no count is negative (``subtract`` drops a bucket it empties), and ``_keys``, when kept, is
    ``sorted(counts)``: whatever changes ``counts`` goes through this class or ``count_buckets``, which keep
    ``_keys`` so or drop it.
    """

    __slots__ = ("counts", "count", "_sum", "_keys", "_memo")

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts) if counts else {}
        self.count = sum(self.counts.values())
        # A running sum of the reported values: the mean in O(1).
        self._sum: float = sum(value_of(b) * n for b, n in self.counts.items())
        self._keys: list[int] | None = None
        """The buckets in order, kept up to date from the first quantile on (None: not asked for yet)."""
        self._memo: _Memo | None = None
        """The cumulative counts and the quantiles answered since the last change (None: changed since)."""

    def add(self, value: float, n: int = 1) -> None:
        self.add_bucket(bucket_of(value), n)

    def add_bucket(self, bucket: int, n: int = 1) -> None:
        """Count ``n`` values of ``bucket`` (``bucket_of`` of them): one index for several histograms."""
        counts = self.counts
        old = counts.get(bucket)
        if old is None:
            counts[bucket] = n
            if self._keys is not None:
                insort(self._keys, bucket)
        else:
            counts[bucket] = old + n
        self.count += n
        self._sum += value_of(bucket) * n
        self._memo = None

    def merge(self, other: LogHistogram) -> None:
        counts = self.counts
        buckets = len(counts)
        for bucket, n in other.counts.items():
            counts[bucket] = counts.get(bucket, 0) + n
        if len(counts) != buckets:
            self._keys = None  # new buckets (a merge is rare, a sample is not): sorted again at the next quantile
        self.count += other.count
        self._sum += other._sum
        self._memo = None

    def subtract(self, other: LogHistogram) -> None:
        """Remove ``other``'s counts (it must have been merged in): how a window drops an old slice."""
        counts = self.counts
        buckets = len(counts)
        for bucket, n in other.counts.items():
            left = counts.get(bucket, 0) - n
            if left > 0:
                counts[bucket] = left
            else:
                counts.pop(bucket, None)
        if len(counts) != buckets:
            self._keys = None  # buckets emptied (once per slice that ages out): sorted again at the next quantile
        self.count -= other.count
        if self.count > 0:
            self._sum -= other._sum
        else:
            self._sum = 0.0  # no rounding residue on an empty histogram
        self._memo = None

    def copy(self) -> LogHistogram:
        return LogHistogram(self.counts)

    @classmethod
    def merged(cls, histograms: Iterable[LogHistogram]) -> LogHistogram:
        total = cls()
        for histogram in histograms:
            total.merge(histogram)
        return total

    def _cumulative(self) -> _Memo:
        """The memo: the buckets in order, the counts summed in that order (once per change), the answers so far."""
        memo = self._memo
        if memo is None:
            keys = self._keys
            if keys is None:
                keys = self._keys = sorted(self.counts)
            memo = self._memo = (keys, list(accumulate(map(self.counts.__getitem__, keys))), {})
        return memo

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
        keys, cumulative, answers = self._cumulative()
        if q in answers:
            return answers[q]
        # The first bucket whose cumulative count passes the rank (no count is negative: the sums never fall).
        index = bisect_right(cumulative, math.floor(q * (self.count - 1)))
        result = value_of(keys[index]) if index < len(keys) else None
        answers[q] = result
        return result

    def mean(self) -> float | None:
        return self._sum / self.count if self.count > 0 else None

    def total(self) -> float:
        """The sum of the values counted (each as its bucket reports it)."""
        return self._sum

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogHistogram) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"LogHistogram(count={self.count}, buckets={len(self.counts)})"
