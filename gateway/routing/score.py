"""The request-aware score: predict each deployment's time and money for *this* request.

Pure functions of a stats snapshot, the policy and the request's shape; no state, no clock,
no randomness, so that a ranking can be explained exactly and unit-tested on a fixed
snapshot (``StatsSnapshot.from_samples``).

For each deployment::

    time  = TTFT(q) + expected_output_tokens / tokens_per_s(q)      (seconds)
          = E[TTFT] + expected_output_tokens * E[1 / tokens_per_s]  (with ``estimate = "mean"``)
    money = (prompt_tokens * price_in + expected_output_tokens * price_out) / 1e6   (USD)

``expected_output_tokens`` is the request's ``max_tokens``, else the model's observed median
answer length, else the policy's ``default_output_tokens``: a 5-token classification is
thus sent to the lowest first-token latency, a 2,000-token essay to the highest throughput.
A deployment with no samples of a metric yet borrows the model's pooled value (marked
``prior``), so it ranks as an average one until it has been measured. The score itself is
described in ``gateway.policies``: a weighted sum of log2 ratios against the best candidate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.config import DeploymentConfig
from gateway.policies import PolicyConfig
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences, Sort
from gateway.samples import Endpoint
from gateway.stats import DeploymentSummary, LogHistogram, StatsSnapshot

OutputSource = Literal["request", "observed", "default"]
MIN_TIME_S = 1e-3
SUCCESS_PRIOR = 2
"""Pseudo-successes added to the success rate, so one early failure does not sink a deployment."""
PRICE_RESOLUTION = 0.01
"""Costs within this share of the dearest candidate count as equal (and a free deployment is not infinitely better)."""


@dataclass(frozen=True, slots=True)
class Weights:
    """The score's weights (see ``gateway.policies``)."""

    time: float
    ttft: float
    throughput: float
    price: float
    failure: float

    @classmethod
    def of(cls, policy: PolicyConfig, sort: Sort | None = None) -> Weights:
        """The policy's weights, or those of a request's ``sort`` (a small price term breaks ties)."""
        if sort == "price":
            return cls(time=0.05, ttft=0.0, throughput=0.0, price=1.0, failure=policy.failure_weight)
        if sort == "throughput":
            return cls(time=0.0, ttft=0.0, throughput=1.0, price=0.05, failure=policy.failure_weight)
        if sort == "latency":
            return cls(time=0.0, ttft=1.0, throughput=0.0, price=0.05, failure=policy.failure_weight)
        return cls(
            policy.time_weight, policy.ttft_weight, policy.throughput_weight, policy.price_weight, policy.failure_weight
        )


@dataclass(frozen=True, slots=True)
class RequestShape:
    """What the score needs of a request."""

    endpoint: Endpoint
    prompt_tokens: int
    output_tokens: int
    output_source: OutputSource


@dataclass(frozen=True, slots=True)
class Prediction:
    """One deployment's predicted performance for one request; None where nothing is known."""

    ttft_s: float | None
    tokens_per_s: float | None
    time_s: float | None
    cost_usd: float
    success_rate: float
    """Smoothed: (ok + 2) / (attempts + 2)."""
    attempts: int
    """Attempts in the stats window that say something of the provider."""
    prior: bool
    """Some of the prediction is the model's pooled value, not this deployment's own."""
    best_time_s: float | None = None
    """The time its fastest measured answers suggest (fastest TTFT, fastest stream): an optimistic bound."""
    drift: bool = False
    """Its last answers disagreed with the window by more than ``DRIFT_RATIO``: the prediction is theirs."""


@dataclass(frozen=True, slots=True)
class Recent:
    """A deployment's last few answers on this replica, newer than the stats window can show.

    Each answer is ``(ttft_s, seconds_per_token, e2e_s)``, oldest first; None where not measured.
    """

    answers: tuple[tuple[float | None, float | None, float | None], ...]

    def times(self, shape: RequestShape) -> list[float]:
        """Each answer's time for a request of this shape."""
        times = []
        for ttft, seconds_per_token, e2e in self.answers:
            if ttft is not None and shape.endpoint != "embeddings":
                times.append(ttft + shape.output_tokens * (seconds_per_token or 0.0))
            elif e2e is not None:
                times.append(e2e)
        return times

    def mean(self, index: int) -> float | None:
        """The mean of one field (0: TTFT, 1: seconds per token, 2: end-to-end) over the answers that have it."""
        known = [v for v in (a[index] for a in self.answers) if v is not None]
        return sum(known) / len(known) if known else None


DRIFT_RATIO = 1.5
"""Recent answers this much slower (or faster) than the window's prediction replace it."""
DRIFT_MIN_ANSWERS = 3


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """The weighted terms of a score; each is 0 for the best candidate on that dimension."""

    time: float = 0.0
    ttft: float = 0.0
    throughput: float = 0.0
    price: float = 0.0
    failure: float = 0.0

    @property
    def total(self) -> float:
        return self.time + self.ttft + self.throughput + self.price + self.failure


@dataclass(frozen=True, slots=True)
class Scored:
    """A deployment with its prediction, score (lower is better) and broken soft constraints."""

    deployment: DeploymentConfig
    prediction: Prediction
    parts: ScoreParts
    violations: tuple[str, ...]

    @property
    def score(self) -> float:
        return self.parts.total


def expected_output(
    model: str, max_tokens: int | None, snapshot: StatsSnapshot, policy: PolicyConfig
) -> tuple[int, OutputSource]:
    """The answer length to predict with, and where it came from."""
    if max_tokens is not None:
        return max_tokens, "request"
    observed = snapshot.model_quantile(model, "output_tokens", 0.5)
    if observed is not None and observed >= 1:
        return round(observed), "observed"
    return policy.default_output_tokens, "default"


def predict(
    model: str,
    deployment: DeploymentConfig,
    shape: RequestShape,
    snapshot: StatsSnapshot,
    policy: PolicyConfig,
    recent: Recent | None = None,
) -> Prediction:
    """One deployment's prediction for this request.

    ``recent`` (the router's memory of the deployment's last answers) overrides the window when
    each of the last ``DRIFT_MIN_ANSWERS`` puts the time more than ``DRIFT_RATIO`` away from it: a
    provider that just slowed down fivefold is seen after a few answers, not after enough of
    them to move a five-minute average.
    """
    summary = snapshot.get(model, deployment.name)
    ttft, ttft_prior = _estimate(summary, snapshot, model, "ttft_s", policy)
    tps, tps_prior = _estimate(summary, snapshot, model, "tokens_per_s", policy)
    time_s: float | None = None
    prior = False
    if shape.endpoint != "embeddings" and ttft is not None:
        time_s = ttft + (shape.output_tokens / tps if tps else 0.0)
        prior = ttft_prior or (tps_prior and tps is not None)
    if time_s is None:
        # Non-streamed traffic and embeddings carry no first-token timings: end-to-end stands in.
        time_s, prior = _estimate(summary, snapshot, model, "e2e_s", policy)
    drift = False
    if recent is not None and time_s is not None and not prior:
        times = recent.times(shape)
        last = [t / max(time_s, MIN_TIME_S) for t in times[-DRIFT_MIN_ANSWERS:]]
        # Every one of the last answers must disagree, the same way: one slow outlier is not a drift.
        if len(last) == DRIFT_MIN_ANSWERS and (min(last) > DRIFT_RATIO or max(last) < 1 / DRIFT_RATIO):
            drift = True
            time_s = sum(times) / len(times)
            recent_ttft, seconds_per_token = recent.mean(0), recent.mean(1)
            ttft = recent_ttft if recent_ttft is not None else ttft
            tps = 1 / seconds_per_token if seconds_per_token else tps
    cost = deployment.cost_usd(shape.prompt_tokens, shape.output_tokens)
    attempts = summary.attempts if summary else 0
    ok = summary.outcomes.get("ok", 0) if summary else 0
    return Prediction(
        ttft_s=ttft,
        tokens_per_s=tps,
        time_s=None if time_s is None else max(time_s, MIN_TIME_S),
        cost_usd=cost,
        success_rate=(ok + SUCCESS_PRIOR) / (attempts + SUCCESS_PRIOR),
        attempts=attempts,
        prior=prior,
        best_time_s=_best_time(summary, shape),
        drift=drift,
    )


def _best_time(summary: DeploymentSummary | None, shape: RequestShape) -> float | None:
    if summary is None:
        return None
    ttft = summary.quantile("ttft_s", 0.0)
    if ttft is not None and shape.endpoint != "embeddings":
        tps = summary.quantile("tokens_per_s", 1.0)
        return ttft + (shape.output_tokens / tps if tps else 0.0)
    return summary.quantile("e2e_s", 0.0)


def _estimate(
    summary: DeploymentSummary | None, snapshot: StatsSnapshot, model: str, metric: MetricName, policy: PolicyConfig
) -> tuple[float | None, bool]:
    """The policy's estimate of ``metric``: the deployment's own, else the model's pooled one (a prior)."""
    histogram = summary.histograms.get(metric) if summary is not None else None
    prior = histogram is None or histogram.count == 0
    if prior:
        pooled = [
            s.histograms[metric] for (m, _), s in snapshot.summaries.items() if m == model and metric in s.histograms
        ]
        histogram = LogHistogram.merged(pooled) if pooled else None
    if histogram is None or histogram.count == 0:
        return None, False
    if policy.estimate == "mean":
        # Time is linear in seconds per token, so the expected stream time needs the harmonic mean of tokens/s.
        return (histogram.harmonic_mean() if metric == "tokens_per_s" else histogram.mean()), prior
    if metric == "tokens_per_s":
        # Tokens/s is a floor: a "p95" policy predicts with the speed 95% of responses reached.
        return histogram.quantile(1.0 - policy.tps_quantile), prior
    return histogram.quantile(policy.ttft_quantile), prior


MetricName = Literal["ttft_s", "tokens_per_s", "e2e_s"]


def score_all(
    model: str,
    deployments: Sequence[DeploymentConfig],
    shape: RequestShape,
    snapshot: StatsSnapshot,
    policy: PolicyConfig,
    preferences: ProviderPreferences = NO_PREFERENCES,
    recent: Mapping[str, Recent] | None = None,
) -> list[Scored]:
    """Every deployment scored against the best of the others, in the given order (not sorted)."""
    weights = Weights.of(policy, preferences.sort)
    recent = recent or {}
    predictions = [predict(model, d, shape, snapshot, policy, recent.get(d.name)) for d in deployments]
    best_time = _best(p.time_s for p in predictions)
    best_ttft = _best(p.ttft_s for p in predictions)
    best_tps = max((p.tokens_per_s for p in predictions if p.tokens_per_s), default=None)
    costs = [p.cost_usd for p in predictions]
    epsilon = max(costs, default=0.0) * PRICE_RESOLUTION
    best_cost = min(costs, default=0.0)
    scored = []
    for deployment, p in zip(deployments, predictions, strict=True):
        parts = ScoreParts(
            time=weights.time * _log_ratio(p.time_s, best_time),
            ttft=weights.ttft * _log_ratio(p.ttft_s, best_ttft),
            throughput=weights.throughput * _log_ratio(best_tps, p.tokens_per_s),
            price=weights.price * math.log2((p.cost_usd + epsilon) / (best_cost + epsilon)) if epsilon > 0 else 0.0,
            failure=weights.failure * math.log2(1.0 / max(p.success_rate, 0.01)),
        )
        summary = snapshot.get(model, deployment.name)
        violations = _violations(deployment, p, summary, policy, preferences)
        scored.append(Scored(deployment, p, parts, violations))
    return scored


def _best(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _log_ratio(value: float | None, best: float | None) -> float:
    """log2(value / best); 0 when either is unknown (nothing to tell candidates apart by)."""
    if value is None or best is None or value <= 0 or best <= 0:
        return 0.0
    return max(0.0, math.log2(value / best))


def _violations(
    deployment: DeploymentConfig,
    p: Prediction,
    summary: DeploymentSummary | None,
    policy: PolicyConfig,
    preferences: ProviderPreferences,
) -> tuple[str, ...]:
    """Soft constraints broken. Measured ones are judged on the deployment's own numbers, once it has
    ``min_samples`` attempts (a prior or a single slow answer proves nothing)."""
    found: list[str] = []
    if policy.max_price_in is not None and deployment.price_in > policy.max_price_in:
        found.append(f"price_in {deployment.price_in:g} > {policy.max_price_in:g}")
    if policy.max_price_out is not None and deployment.price_out > policy.max_price_out:
        found.append(f"price_out {deployment.price_out:g} > {policy.max_price_out:g}")
    if summary is None or p.attempts < max(1, policy.min_samples):
        return tuple(found)
    if policy.max_ttft_s is not None:
        ttft = summary.quantile("ttft_s", policy.ttft_quantile)
        if ttft is not None and ttft > policy.max_ttft_s:
            found.append(f"ttft {ttft:.3g}s > {policy.max_ttft_s:g}s")
    if policy.min_tokens_per_s is not None:
        tps = summary.quantile("tokens_per_s", 1.0 - policy.tps_quantile)
        if tps is not None and tps < policy.min_tokens_per_s:
            found.append(f"tokens/s {tps:.3g} < {policy.min_tokens_per_s:g}")
    if policy.min_success_rate is not None and p.success_rate < policy.min_success_rate:
        found.append(f"success {p.success_rate:.2f} < {policy.min_success_rate:g}")
    for q, ceiling in preferences.max_ttft_s:
        value = summary.quantile("ttft_s", q)
        if value is not None and value > ceiling:
            found.append(f"ttft p{q * 100:g} {value:.3g}s > preferred {ceiling:g}s")
    for q, floor in preferences.min_tokens_per_s:
        # A throughput percentile is a floor: "p90" is the speed 90% of responses reached.
        value = summary.quantile("tokens_per_s", 1.0 - q)
        if value is not None and value < floor:
            found.append(f"tokens/s p{q * 100:g} {value:.3g} < preferred {floor:g}")
    return tuple(found)
