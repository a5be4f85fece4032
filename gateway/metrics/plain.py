"""prometheus-client's Counter, Histogram and Gauge with plain values: the single-process metrics' hot path.

Each series of prometheus-client keeps its value in a ``MutexValue`` (a float behind a lock) and a
histogram finds its bucket with a Python loop over the bounds; per request the gateway updates a
dozen series, which cost about as much as the stats store's whole ``record``. Here the value is a
plain float (the metrics are updated from the event loop only; a scrape in another thread reads a
float, which the GIL keeps whole, as the lock did, and never writes), and ``observe`` finds the
bucket by bisection. Everything else is prometheus-client's own: the families, ``labels``, the
``_created`` times, ``collect`` and the exposition, so what a scrape shows is unchanged.

Only for one process: under ``--workers N`` the values must live in prometheus-client's
multiprocess files, which only its own value classes write, so ``gateway.metrics.host`` keeps the
stock classes.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any

from prometheus_client import Counter, Gauge, Histogram


class PlainValue:
    """``MutexValue``'s interface without the lock."""

    __slots__ = ("_value", "_exemplar")

    def __init__(self) -> None:
        self._value = 0.0
        self._exemplar: Any = None

    def inc(self, amount: float) -> None:
        self._value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        self._value = value

    def set_exemplar(self, exemplar: Any) -> None:
        self._exemplar = exemplar

    def get(self) -> float:
        return self._value

    def get_exemplar(self) -> Any:
        return self._exemplar


class PlainCounter(Counter):
    def _metric_init(self) -> None:
        self._value = PlainValue()
        self._created = time.time()

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        if amount < 0 or exemplar or not self._labelvalues and self._labelnames:
            super().inc(amount, exemplar)  # its errors, and the exemplar
            return
        self._value._value += amount


class PlainHistogram(Histogram):
    def _metric_init(self) -> None:
        self._created = time.time()
        self._sum = PlainValue()
        self._buckets = [PlainValue() for _ in self._upper_bounds]

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        if exemplar or not self._labelvalues and self._labelnames:
            super().observe(amount, exemplar)
            return
        self._sum._value += amount
        bounds = self._upper_bounds
        index = bisect_left(bounds, amount)  # the first bound >= amount: the loop's first ``amount <= bound``
        if index < len(bounds) and amount <= bounds[index]:  # never for NaN, as in the loop
            self._buckets[index]._value += 1


class PlainGauge(Gauge):
    def _metric_init(self) -> None:
        self._value = PlainValue()

    def inc(self, amount: float = 1) -> None:
        if self._is_most_recent or not self._labelvalues and self._labelnames:
            super().inc(amount)  # its errors
            return
        self._value._value += amount

    def dec(self, amount: float = 1) -> None:
        if self._is_most_recent or not self._labelvalues and self._labelnames:
            super().dec(amount)
            return
        self._value._value += -amount  # as prometheus-client's dec: inc(-amount)
