"""A rolling window of time slices, with a running total kept up to date incrementally.

Each slice (``slice_s`` wide) holds one ``DeploymentSummary`` per (model, deployment). The
window's total is updated on every ``add`` and has whole slices subtracted as they age out,
so reading it costs nothing however many slices the window spans: the router can read it on
every request.

A sample lands in the slice of the moment it is *recorded* (when its attempt ended), not of
``Sample.started_at``: a ten-minute stream then still counts (instead of arriving already older
than the window), and a slice stops changing once its time has passed, which is what lets the
Redis backend cache closed slices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gateway.samples import Sample
from gateway.stats.sketch import count_buckets
from gateway.stats.snapshot import DeploymentSummary, Metric, StatsSnapshot, sample_buckets
from gateway.types import Clock, DeploymentKey

SliceSummaries = dict[DeploymentKey, DeploymentSummary]


def slice_index(wall_time: float, slice_s: int) -> int:
    return math.floor(wall_time / slice_s)


def merge_slices(totals: SliceSummaries, slices: Mapping[int, SliceSummaries], oldest: int) -> None:
    """Add every slice from index ``oldest`` on to ``totals``, copying the summaries ``totals`` lacks."""
    for index, summaries in slices.items():
        if index < oldest:
            continue
        for key, summary in summaries.items():
            total = totals.get(key)
            if total is None:
                totals[key] = summary.copy()
            else:
                total.merge(summary)


def subtract(total: DeploymentSummary, part: DeploymentSummary) -> None:
    """Remove ``part``'s counts from ``total`` (``part`` must have been merged into it)."""
    for outcome, n in part.outcomes.items():
        left = total.outcomes.get(outcome, 0) - n
        if left > 0:
            total.outcomes[outcome] = left
        else:
            total.outcomes.pop(outcome, None)
    for key, n in part.validity.items():
        left = total.validity.get(key, 0) - n
        if left > 0:
            total.validity[key] = left
        else:
            total.validity.pop(key, None)
    for metric, histogram in part.histograms.items():
        mine = total.histograms.get(metric)
        if mine is None:
            continue
        mine.subtract(histogram)
        if mine.count <= 0:
            del total.histograms[metric]


_VALIDITY_KEYS: dict[tuple[str, str], str] = {}


def _validity_key(kind: str, verdict: str) -> str:
    """``validity_key``'s ``kind:verdict``, each made once (a few dozen pairs exist): one look-up per sample, no
    string built."""
    key = _VALIDITY_KEYS.get((kind, verdict))
    if key is None:
        key = _VALIDITY_KEYS[(kind, verdict)] = f"{kind}:{verdict}"
    return key


PENDING_SAMPLES = 64
"""Samples the minute history (``gateway.stats.history.MinuteBuckets``) holds uncounted, at most."""


class SlicedWindow:
    """The last ``window_s`` seconds of samples, in ``slice_s`` slices. Not thread-safe (one event loop).

    ``wall_clock`` is injectable so that expiry can be tested without waiting.

    ``add`` counts a sample in the total (the router reads it on every request) and in its slice at once, in one
    pass over its buckets: each bucket's reported value and reciprocal are looked up once for both. Counted in the
    order they came, the slice's sums are the ones its samples made, so the total's, once the slice is subtracted,
    are too.
    """

    def __init__(self, window_s: int, slice_s: int, wall_clock: Clock) -> None:
        self.slice_s = slice_s
        self.slices_in_window = max(1, window_s // slice_s)
        self.wall_clock = wall_clock
        self.slices: dict[int, SliceSummaries] = {}
        """Each slice's summaries by index."""
        self.total: SliceSummaries = {}
        self._expired_for: int | None = None
        """The slice index ``add`` last expired for: within one slice, nothing more can age out."""
        self._kept_from: int | None = None
        """No slice's index is below this (None: not known): the oldest the last ``expire`` kept, lowered by a slice
        added below it. ``expire_aged`` skips the pass when the oldest to keep is not above it."""

    def _oldest_kept(self) -> int:
        return slice_index(self.wall_clock(), self.slice_s) - self.slices_in_window + 1

    def expire(self) -> None:
        """Drop slices that fell out of the window, subtracting them from the total."""
        self._expire_before(self._oldest_kept())

    def expire_aged(self) -> None:
        """``expire``, with its pass over the slices skipped where it would drop none: no slice is older than the
        oldest it keeps (``_kept_from``). The clock is read once, as ``expire`` reads it."""
        oldest = math.floor(self.wall_clock() / self.slice_s) - self.slices_in_window + 1  # ``_oldest_kept``, inline
        kept_from = self._kept_from
        if kept_from is None or oldest > kept_from:
            self._expire_before(oldest)

    def _expire_before(self, oldest: int) -> None:
        slices = self.slices
        for index in [i for i in slices if i < oldest]:
            for key, part in slices.pop(index).items():
                total = self.total.get(key)
                if total is not None:
                    subtract(total, part)
                    if not total.outcomes:
                        del self.total[key]
        self._kept_from = oldest

    def add(
        self, sample: Sample, buckets: Mapping[Metric, int] | None = None, key: DeploymentKey | None = None
    ) -> None:
        """Count a sample in the slice of now and in the total (slices that aged out are dropped once per slice).

        ``buckets``: the sample's ``sample_buckets`` when the caller already worked them out (the store
        hands the same ones to the minute history); ``key``: its (model, deployment), likewise."""
        index = math.floor(self.wall_clock() / self.slice_s)  # slice_index, inline
        if index != self._expired_for:
            self.expire()
            self._expired_for = index
        summaries = self.slices.get(index)
        if summaries is None:
            summaries = self.slices[index] = {}
            self._added_at(index)
        if key is None:
            key = (sample.model, sample.deployment)
        if buckets is None:
            buckets = sample_buckets(sample)
        kind, verdict = sample.kind, sample.validity
        # ``_validity_key``, its look-up inline (a frame per sample); a pair not seen yet made there.
        validity = None if kind is None or verdict is None else _VALIDITY_KEYS.get((kind, verdict))
        if validity is None and kind is not None and verdict is not None:
            validity = _validity_key(kind, verdict)
        outcome = sample.outcome
        part = summaries.get(key)
        if part is None:
            part = summaries[key] = DeploymentSummary(key[0], key[1])
        total = self.total.get(key)
        if total is None:
            total = self.total[key] = DeploymentSummary(sample.model, sample.deployment)
        # The slice's counts before the total's, as ``DeploymentSummary.add_buckets`` of each would make them.
        outcomes = part.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        outcomes = total.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if validity is not None:
            part.validity[validity] = part.validity.get(validity, 0) + 1
            total.validity[validity] = total.validity.get(validity, 0) + 1
        count_buckets(part.histograms, buckets, also=total.histograms)

    def add_summary(self, index: int, part: DeploymentSummary) -> bool:
        """Merge a slice's worth of one deployment (read from elsewhere); False if out of the window."""
        if index < self._oldest_kept():
            return False
        key = (part.model, part.deployment)
        summaries = self.slices.setdefault(index, {})
        self._added_at(index)
        for target in (summaries, self.total):
            summary = target.get(key)
            if summary is None:
                target[key] = part.copy()
            else:
                summary.merge(part)
        return True

    def _added_at(self, index: int) -> None:
        """A slice at ``index`` exists now: ``_kept_from`` is at most it."""
        kept_from = self._kept_from
        if kept_from is not None and index < kept_from:
            self._kept_from = index

    def oldest_kept(self) -> int:
        """Index of the oldest slice still in the window."""
        return self._oldest_kept()

    def clear(self) -> None:
        self.slices.clear()
        self.total.clear()

    def snapshot(self) -> StatsSnapshot:
        """The window's total as a snapshot. It shares state with the window: read it before the next ``add``."""
        self.expire()
        return StatsSnapshot(self.total, taken_at=self.wall_clock())
