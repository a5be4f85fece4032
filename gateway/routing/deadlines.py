"""Learned deadlines: how long one attempt at a deployment may wait for its first token, and between chunks.

``deadline_multiple`` × the deployment's TTFT p99 (the shared window) and × the p99 of its answers' longest chunk gap
(this replica's), within [``deadline_floor_s``, the configured timeout] (docs/routing.md, "Learned deadlines").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.policies import PolicyConfig
from gateway.stats import DeploymentSummary
from gateway.types import DeploymentKey


@dataclass(frozen=True, slots=True)
class Deadlines:
    """One attempt's limits, in seconds: to its first token, and between two chunks of its stream."""

    first_token_s: float
    idle_s: float


@dataclass(slots=True)
class GapWindow:
    """The longest chunk gap of each of a deployment's last 128 complete answers."""

    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=128))

    def add(self, chunk_gaps_s: Sequence[float]) -> None:
        if chunk_gaps_s:
            self.gaps.append(longest(chunk_gaps_s))

    def quantile(self, q: float) -> float | None:
        if not self.gaps:
            return None
        ordered = sorted(self.gaps)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def longest(gaps: Sequence[float]) -> float:
    """``max(gaps)`` of a non-empty sequence, by the builtin's rule; over a tuple (a sample's gaps) a loop that,
    compiled, compares native doubles: it runs on every chunk gap of every stream."""
    if isinstance(gaps, tuple):
        return _longest_of(gaps)
    return max(gaps)


def _longest_of(gaps: tuple[float, ...]) -> float:
    found = gaps[0]
    for gap in gaps:
        if gap > found:
            found = gap
    return found


@dataclass
class LearnedDeadlines:
    """Every deployment's gap window and its deadlines, recomputed at most once a second (the p99 walks a
    histogram)."""

    windows: dict[DeploymentKey, GapWindow] = field(default_factory=dict)
    cached: dict[DeploymentKey, tuple[float, Deadlines]] = field(default_factory=dict)

    def observe(self, key: DeploymentKey, chunk_gaps_s: Sequence[float]) -> None:
        """A complete answer's chunk gaps: only answers that ended well say what a healthy gap is."""
        if not chunk_gaps_s:
            return
        window = self.windows.get(key)
        if window is None:
            window = self.windows[key] = GapWindow()
        window.add(chunk_gaps_s)

    def of(
        self, key: DeploymentKey, policy: PolicyConfig, summary: DeploymentSummary | None, now: float
    ) -> Deadlines | None:
        """The deployment's learned deadlines, or None when it has too little history (configured values apply)."""
        if policy.deadline_multiple <= 0:
            return None
        entry = self.cached.get(key)
        if entry is not None and now - entry[0] < 1.0:
            return entry[1]
        deadlines = learn(policy, summary, self.windows.get(key))
        if deadlines is not None:
            self.cached[key] = (now, deadlines)
        else:
            self.cached.pop(key, None)
        return deadlines


def learn(policy: PolicyConfig, summary: DeploymentSummary | None, gaps: GapWindow | None) -> Deadlines | None:
    """``deadline_multiple`` × the p99s, within [``deadline_floor_s``, the configured timeout]."""
    needed = max(1, policy.min_samples)
    if summary is None or summary.count("ttft_s") < needed:
        return None
    ttft_p99 = summary.quantile("ttft_s", 0.99)
    if ttft_p99 is None:
        return None
    first_token = _bounded(policy.deadline_multiple * ttft_p99, policy, policy.first_token_timeout_s)
    idle = policy.idle_timeout_s
    if gaps is not None and len(gaps.gaps) >= needed:
        gap_p99 = gaps.quantile(0.99)
        if gap_p99 is not None:
            idle = _bounded(policy.deadline_multiple * gap_p99, policy, policy.idle_timeout_s)
    return Deadlines(first_token, idle)


def _bounded(value: float, policy: PolicyConfig, ceiling: float) -> float:
    return min(ceiling, max(policy.deadline_floor_s, value))
