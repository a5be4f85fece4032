"""What the router and the leaderboard read: per (model, deployment) summaries over the window.

A ``StatsSnapshot`` is a read-only *view* of the store's current window: reading it never does
I/O, so it is safe on the request path. It is not a frozen copy: the stores hand out their live
summaries (copying them on every request would cost more than the routing decision itself), so
this replica's next sample shows in it at once. Read what you need from it within one step of
the event loop, never mutate it, and copy it (``from_samples`` or a deep copy) to keep it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.samples import OUTCOMES, VALIDITIES, Outcome, RequestKind, Sample
from gateway.stats.answers import NO_ANSWERS, AnswerLog
from gateway.stats.sketch import LogHistogram, count_buckets
from gateway.stats.values import (
    METRICS,
    Metric,
    sample_buckets,
    sample_values,
)
from gateway.types import DeploymentKey

# Outcomes that count neither for nor against the provider's success: the client left, the request was at fault,
# or the request's own deadline cut a stream that was still coming (its timings count: ``sample_values``).
NEUTRAL_OUTCOMES: frozenset[Outcome] = frozenset({"client_cancelled", "client_error", "deadline"})


VALIDITY_KEYS: frozenset[str] = frozenset(f"{k}:{v}" for k in ("tools", "json", "plain") for v in VALIDITIES)
"""Every ``kind:verdict`` a summary counts validity by (``tools:valid``, ``plain:empty`` ...)."""


def validity_key(sample: Sample) -> str | None:
    """Where a sample counts in its summary's validity: ``kind:verdict``; None when its answer was not judged."""
    if sample.kind is None or sample.validity is None:
        return None
    return f"{sample.kind}:{sample.validity}"


@dataclass
class DeploymentSummary:
    """One deployment's window: outcome counts and a histogram per metric."""

    model: str
    deployment: str
    outcomes: dict[Outcome, int] = field(default_factory=dict)
    histograms: dict[Metric, LogHistogram] = field(default_factory=dict)
    validity: dict[str, int] = field(default_factory=dict)
    """Judged answers by ``kind:verdict`` (``tools:valid``, ``tools:tool_args_not_json`` ...): the valid rate
    per request kind, beside the success rate (``validity_key``)."""

    def add(self, sample: Sample) -> None:
        self.add_buckets(sample.outcome, sample_buckets(sample), validity_key(sample))

    def add_buckets(self, outcome: Outcome, buckets: Mapping[Metric, int], validity: str | None = None) -> None:
        """Count one sample given as its outcome, ``sample_buckets`` and ``validity_key``: the window adds one
        sample to two summaries (its slice's and the total) and works its bucket indexes out once."""
        outcomes = self.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if validity is not None:
            self.validity[validity] = self.validity.get(validity, 0) + 1
        count_buckets(self.histograms, buckets)

    def merge(self, other: DeploymentSummary) -> None:
        for outcome, n in other.outcomes.items():
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n
        for key, n in other.validity.items():
            self.validity[key] = self.validity.get(key, 0) + n
        for metric, histogram in other.histograms.items():
            mine = self.histograms.get(metric)
            if mine is None:
                self.histograms[metric] = histogram.copy()
            else:
                mine.merge(histogram)

    def copy(self) -> DeploymentSummary:
        copy = DeploymentSummary(self.model, self.deployment, dict(self.outcomes))
        copy.histograms = {m: h.copy() for m, h in self.histograms.items()}
        copy.validity = dict(self.validity)
        return copy

    @property
    def attempts(self) -> int:
        """Attempts that say something of the provider's success (``NEUTRAL_OUTCOMES`` excluded).

        Every sample less the neutral ones (counts are integers: the same sum as adding the others), without a
        generator: the router reads it for every deployment on every plan."""
        outcomes = self.outcomes
        get = outcomes.get
        return sum(outcomes.values()) - get("client_cancelled", 0) - get("client_error", 0) - get("deadline", 0)

    @property
    def samples(self) -> int:
        """Every attempt in the window, whatever its outcome."""
        return sum(self.outcomes.values())

    def success_rate(self) -> float | None:
        attempts = self.attempts
        return None if attempts == 0 else self.outcomes.get("ok", 0) / attempts

    def valid_counts(self, kind: RequestKind | None = None) -> tuple[int, int]:
        """(valid, judged) answers of one request kind, or of all kinds (None)."""
        valid = judged = 0
        for key, n in self.validity.items():
            key_kind, _, verdict = key.partition(":")
            if kind is None or key_kind == kind:
                judged += n
                if verdict == "valid":
                    valid += n
        return valid, judged

    def valid_rate(self, kind: RequestKind | None = None) -> float | None:
        """Valid ÷ judged answers of one request kind, or of all (None: none judged)."""
        valid, judged = self.valid_counts(kind)
        return None if judged == 0 else valid / judged

    def invalid_reasons(self, kind: RequestKind | None = None) -> dict[str, int]:
        """Invalid answers by reason, most frequent first."""
        reasons: dict[str, int] = {}
        for key, n in self.validity.items():
            key_kind, _, verdict = key.partition(":")
            if verdict != "valid" and (kind is None or key_kind == kind):
                reasons[verdict] = reasons.get(verdict, 0) + n
        return dict(sorted(reasons.items(), key=lambda item: -item[1]))

    def top_reason(self, kind: RequestKind | None = None) -> str | None:
        """The most frequent reason an answer was invalid (None: none was)."""
        return next(iter(self.invalid_reasons(kind)), None)

    def quantile(self, metric: Metric, q: float) -> float | None:
        histogram = self.histograms.get(metric)
        return None if histogram is None else histogram.quantile(q)

    def hit_ratio(self) -> float | None:
        """Cached ÷ prompt tokens over the answers that reported them (None: none did)."""
        prompt = self.histograms.get("prompt_tokens")
        if prompt is None or prompt.count == 0 or prompt.total() <= 0:
            return None
        cached = self.histograms.get("cached_tokens")
        return 0.0 if cached is None else min(1.0, cached.total() / prompt.total())

    def count(self, metric: Metric) -> int:
        histogram = self.histograms.get(metric)
        return 0 if histogram is None else histogram.count


@dataclass(frozen=True)
class StatsSnapshot:
    """Summaries keyed by (model, deployment): a live, read-only view (see the module docstring)."""

    summaries: Mapping[DeploymentKey, DeploymentSummary] = field(default_factory=dict)
    taken_at: float = 0.0
    """Wall-clock time the snapshot describes (its window ends here)."""
    answers: AnswerLog = NO_ANSWERS
    """Every replica's last answers one by one (``gateway.stats.answers``), live like the summaries."""
    replica: str = ""
    """The replica whose view this is: its own answers in ``answers`` carry this tag."""

    def get(self, model: str, deployment: str) -> DeploymentSummary | None:
        return self.summaries.get((model, deployment))

    @classmethod
    def from_samples(cls, samples: Iterable[Sample], taken_at: float = 0.0) -> StatsSnapshot:
        """A snapshot of exactly these samples (no window): for tests, benchmarks and seeding."""
        summaries: dict[DeploymentKey, DeploymentSummary] = {}
        for sample in samples:
            key = (sample.model, sample.deployment)
            summary = summaries.get(key)
            if summary is None:
                summary = summaries[key] = DeploymentSummary(sample.model, sample.deployment)
            summary.add(sample)
        return cls(summaries, taken_at)


__all__ = [
    "METRICS",
    "OUTCOMES",
    "VALIDITY_KEYS",
    "DeploymentSummary",
    "Metric",
    "StatsSnapshot",
    "sample_buckets",
    "sample_values",
    "validity_key",
]
