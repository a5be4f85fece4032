"""Samples on their way to Redis, already aggregated into the hash fields they will become.

Aggregating at ``record`` time means a flush sends one ``HINCRBY`` per distinct (slice,
deployment, field), however many samples fell into it, and the memory a buffer needs grows with
the number of distinct cells, not with the number of samples: while Redis is down, a busy replica
keeps every sample that falls into a cell it already holds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gateway.samples import Sample
from gateway.stats.redis_layout import cell_count
from gateway.stats.snapshot import DeploymentSummary, Metric, sample_buckets, validity_key
from gateway.stats.window import merge_slices
from gateway.types import DeploymentKey


class WriteBuffer:
    """Per slice index, per (model, deployment): the counts one flush adds. Not thread-safe.

    ``cells`` is the number of hash fields it holds (what bounds its memory), ``samples`` the
    number of samples it aggregates.
    """

    __slots__ = ("slices", "samples", "cells")

    def __init__(self) -> None:
        self.slices: dict[int, dict[DeploymentKey, DeploymentSummary]] = {}
        self.samples = 0
        self.cells = 0

    def __bool__(self) -> bool:
        return self.samples > 0

    def add(
        self,
        index: int,
        sample: Sample,
        room: int,
        buckets: Mapping[Metric, int] | None = None,
        validity: str | None = None,
    ) -> bool:
        """Count ``sample`` in slice ``index``; False (and nothing counted) if it needs more than
        ``room`` new cells beyond those held. ``buckets`` and ``validity``: the sample's ``sample_buckets``
        and ``validity_key`` when the caller has them already (the store counts one sample in three places)."""
        if buckets is None:
            buckets = sample_buckets(sample)
            validity = validity_key(sample)
        pair = (sample.model, sample.deployment)
        summaries = self.slices.setdefault(index, {})
        summary = summaries.get(pair)
        if summary is None:
            new = 1 + len(buckets) + (validity is not None)
        else:
            new = 0 if sample.outcome in summary.outcomes else 1
            new += validity is not None and validity not in summary.validity
            histograms = summary.histograms
            for metric, bucket in buckets.items():
                histogram = histograms.get(metric)
                if histogram is None or bucket not in histogram.counts:
                    new += 1
        if self.cells + new > room:
            if not summaries:
                del self.slices[index]
            return False
        if summary is None:
            summary = summaries[pair] = DeploymentSummary(sample.model, sample.deployment)
        summary.add_buckets(sample.outcome, buckets, validity)
        self.samples += 1
        self.cells += new
        return True

    def absorb(self, other: WriteBuffer) -> None:
        """Add ``other``'s counts to this buffer (``other`` is left as it was)."""
        for index, summaries in other.slices.items():
            mine = self.slices.setdefault(index, {})
            for pair, summary in summaries.items():
                target = mine.get(pair)
                if target is None:
                    mine[pair] = summary.copy()
                    self.cells += cell_count(summary)
                else:
                    before = cell_count(target)
                    target.merge(summary)
                    self.cells += cell_count(target) - before
        self.samples += other.samples

    def pairs(self) -> set[DeploymentKey]:
        return {pair for summaries in self.slices.values() for pair in summaries}

    def take(self, pairs: Collection[DeploymentKey]) -> WriteBuffer:
        """Move every slice's counts of ``pairs`` out of this buffer, into the one returned."""
        taken = WriteBuffer()
        for index in list(self.slices):
            summaries = self.slices[index]
            for pair in [p for p in summaries if p in pairs]:
                summary = summaries.pop(pair)
                taken.slices.setdefault(index, {})[pair] = summary
                cells = cell_count(summary)
                self.cells -= cells
                taken.cells += cells
                self.samples -= summary.samples
                taken.samples += summary.samples
            if not summaries:
                del self.slices[index]
        return taken

    def expire(self, oldest: int) -> int:
        """Drop slices older than ``oldest``; returns how many samples went with them."""
        dropped = 0
        for index in [i for i in self.slices if i < oldest]:
            for summary in self.slices.pop(index).values():
                dropped += summary.samples
                self.cells -= cell_count(summary)
        self.samples -= dropped
        return dropped

    def merge_into(self, totals: dict[DeploymentKey, DeploymentSummary], oldest: int) -> None:
        """Add the slices from ``oldest`` on to ``totals`` (copying what ``totals`` lacks)."""
        merge_slices(totals, self.slices, oldest)
