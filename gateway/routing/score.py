"""The request-aware score: each deployment's prediction for *this* request, weighed by the policy.

Pure functions of the predictions (``gateway.routing.predict``), the policy and the request;
no state, no clock, no randomness, so that a ranking can be explained exactly and unit-tested
on a fixed snapshot (``StatsSnapshot.from_samples``) and a hand-fed ``DeploymentView``.

The score (lower is better, 0 = the best candidate on every weighted dimension) is a sum of
log2 ratios against the best candidate, described in ``gateway.policies``. Beside it, each
deployment gets an exploration ``bonus`` in the same units: how much better than predicted it
might plausibly be (``CONFIDENCE`` standard errors of its uncertain, possibly stale estimate).
``score - bonus`` is its optimistic score; ``gateway.routing.explore`` decides when that is
worth a request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.config import DeploymentConfig
from gateway.frozen import quick_init
from gateway.policies import PolicyConfig
from gateway.routing.estimates import DeploymentView
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences, Sort
from gateway.routing.predict import (
    EFFECTIVE,
    MIN_TIME_S,
    SUCCESS_PRIOR,
    CacheTerms,
    PooledHistograms,
    expected_output,
    predict,
)

__all__ = [
    "MIN_TIME_S",
    "SUCCESS_PRIOR",
    "Weights",
    "expected_output",
    "predict",
    "score_all",
]
from gateway.routing.filters import broken
from gateway.routing.scored import (
    Prediction,
    RequestShape,
    Scored,
    Uncertainty,
    score_parts_from_fields,
    scored_from_fields,
)
from gateway.stats import StatsSnapshot

PRICE_RESOLUTION = 0.01
"""Costs within this share of the dearest candidate count as equal (and a free deployment is not infinitely better)."""
CONFIDENCE = 2.0
"""Standard errors of optimism in the exploration bonus."""
CAUTION = 0.5
"""Share of its speed estimates' sampling error a deployment is ranked behind its score for."""


@quick_init
@dataclass(frozen=True, slots=True)
class Weights:
    """The score's weights (see ``gateway.policies``)."""

    time: float
    ttft: float
    throughput: float
    price: float
    failure: float
    quality: float = 1.0
    """The valid rate's exponent inside the failure term (the policy's ``quality_weight``)."""

    @classmethod
    def of(cls, policy: PolicyConfig, sort: Sort | None = None) -> Weights:
        """The policy's weights, or those of a request's ``sort`` (a small price term breaks ties).

        Kept per policy object and sort (a policy is immutable; the entry holds it, so its id is not reused while
        kept): every plan reads them twice."""
        kept = _WEIGHTS.get((id(policy), sort))
        if kept is not None and kept[0] is policy:
            return kept[1]
        if len(_WEIGHTS) >= WEIGHTS_KEPT:
            _WEIGHTS.clear()  # policies replaced by reloads
        weights = _WEIGHTS[(id(policy), sort)] = (policy, cls._of(policy, sort))
        return weights[1]

    @classmethod
    def _of(cls, policy: PolicyConfig, sort: Sort | None) -> Weights:
        failure, quality = policy.failure_weight, policy.quality_weight
        if sort == "price":
            return cls(time=0.05, ttft=0.0, throughput=0.0, price=1.0, failure=failure, quality=quality)
        if sort == "throughput":
            return cls(time=0.0, ttft=0.0, throughput=1.0, price=0.05, failure=failure, quality=quality)
        if sort == "latency":
            return cls(time=0.0, ttft=1.0, throughput=0.0, price=0.05, failure=failure, quality=quality)
        return cls(
            policy.time_weight,
            policy.ttft_weight,
            policy.throughput_weight,
            policy.price_weight,
            failure,
            quality,
        )


WEIGHTS_KEPT = 256
"""Policies (objects) whose weights are kept: a reload makes new ones; past this many the old are dropped."""
_WEIGHTS: dict[tuple[int, Sort | None], tuple[PolicyConfig, Weights]] = {}


def score_all(
    model: str,
    deployments: Sequence[DeploymentConfig],
    shape: RequestShape,
    snapshot: StatsSnapshot,
    policy: PolicyConfig,
    preferences: ProviderPreferences = NO_PREFERENCES,
    views: Mapping[str, DeploymentView] | None = None,
    now: float = 0.0,
    cache: Mapping[str, CacheTerms] | None = None,
) -> list[Scored]:
    """Every deployment scored against the best of the others, in the given order (not sorted).

    ``views``: the router's fast view of each deployment (by name), read at ``now``; ``cache``: what the
    request's prompt may find cached on each (by name; absent: ``EFFECTIVE``, priced by its hit ratio).
    """
    weights = Weights.of(policy, preferences.sort)
    views = views or {}
    cache = cache or {}
    # Only a deployment with no answer finished yet reads another's envelope (``DeploymentView.in_flight``).
    envelope = _bytes_per_token(views.values()) if any(v.answered == 0 for v in views.values()) else None
    pooled: PooledHistograms = {}  # the model's averages, merged once for all its deployments
    predictions = _with_fallbacks(
        [
            predict(
                model,
                d,
                shape,
                snapshot,
                policy,
                views.get(d.name),
                now,
                cache.get(d.name, EFFECTIVE),
                envelope,
                pooled,
            )
            for d in deployments
        ]
    )
    best_time = _best(p.expected_s for p in predictions)
    best_ttft = _best(p.ttft_s for p in predictions)
    best_tps = max((p.tokens_per_s for p in predictions if p.tokens_per_s), default=None)
    costs = [p.cost_usd for p in predictions]
    epsilon = max(costs, default=0.0) * PRICE_RESOLUTION
    best_cost = min(costs, default=0.0)
    scored = []
    for deployment, p in zip(deployments, predictions, strict=True):
        parts = score_parts_from_fields(
            weights.time * _log_ratio(p.expected_s, best_time),  # time
            weights.ttft * _log_ratio(p.ttft_s, best_ttft),  # ttft
            weights.throughput * _log_ratio(best_tps, p.tokens_per_s),  # throughput
            weights.price * math.log2((p.cost_usd + epsilon) / (best_cost + epsilon)) if epsilon > 0 else 0.0,  # price
            weights.failure * _failure(p, weights.quality),  # failure
        )
        summary = snapshot.summaries.get((model, deployment.name))  # ``snapshot.get``, without its Python frame
        violations = broken(
            deployment,
            summary,
            policy,
            preferences,
            shape.kind,
            success=(p.success_rate, p.attempts),
            valid=(p.valid_rate, p.valid_judged),
        )
        # Nothing of its own measured: the cold start explores it, not a bonus.
        bonus = _bonus(p, p.uncertainty, weights) if p.source in ("recent", "window") else 0.0
        # Nothing measured: as uncertain as can be, so that a tie (on price, say) goes to the measured one.
        caution = CAUTION * _speed(p.sampling, weights)
        scored.append(scored_from_fields(deployment, p, parts, violations, bonus, caution))
    return scored


def _failure(p: Prediction, quality: float) -> float:
    """log2 of 1 / the chance of a good answer: it arrives (success) and it is valid for this request's kind,
    the valid rate weighed by ``quality`` (0: ignored; 1: an invalid answer counts as a failure does)."""
    good = max(p.success_rate, 0.01) * max(p.valid_rate, 0.01) ** quality
    return math.log2(1.0 / good)


def _bytes_per_token(views: Iterable[DeploymentView]) -> dict[str, float]:
    """The model's deployments' stream bytes per output token, pooled by API (an API none finished is absent)."""
    weights: dict[str, float] = {}
    values: dict[str, float] = {}
    for view in views:
        for api, envelope in view.bytes_per_token.items():
            weights[api] = weights.get(api, 0.0) + envelope.weight
            values[api] = values.get(api, 0.0) + envelope.values
    return {api: values[api] / weight for api, weight in weights.items() if weight > 0}


def _with_fallbacks(predictions: list[Prediction]) -> list[Prediction]:
    """Each prediction's ``expected_s``: its time when it answers, and when it fails, the failure's time
    plus the best other deployment's (what the attempt loop then does): a provider that fails 30% of
    requests at once costs a fallback on those, not its whole advantage."""
    result = []
    for i, p in enumerate(predictions):
        if p.time_s is None or p.success_rate >= 1.0:
            result.append(p if p.expected_s == p.time_s else p.with_expected(p.time_s))
            continue
        others = [q.time_s for j, q in enumerate(predictions) if j != i and q.time_s is not None]
        fallback = min(others, default=p.time_s)
        failure = (p.failure_s or 0.0) + fallback
        result.append(p.with_expected(p.success_rate * p.time_s + (1 - p.success_rate) * failure))
    return result


def _speed(uncertainty: Uncertainty, weights: Weights) -> float:
    """``CONFIDENCE`` standard errors of the weighted speed estimates, in log2 (score) units."""
    spread = weights.time * uncertainty.time + weights.ttft * uncertainty.ttft
    return CONFIDENCE * (spread + weights.throughput * uncertainty.tokens_per_s) / math.log(2)


def _bonus(p: Prediction, uncertainty: Uncertainty, weights: Weights) -> float:
    """``CONFIDENCE`` standard errors of each weighted estimate, in log2 (score) units.

    The failure term's error comes from a binomial one: sd(rate) = sqrt(rate (1 - rate) / n), and
    d log2(1 / rate) = d rate / (rate ln 2).
    """
    rate = min(max(p.success_rate, 0.01), 0.99)
    failure = math.sqrt(rate * (1 - rate) / (p.success_samples + SUCCESS_PRIOR)) / rate
    return _speed(uncertainty, weights) + CONFIDENCE * weights.failure * failure / math.log(2)


def _best(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _log_ratio(value: float | None, best: float | None) -> float:
    """log2(value / best); 0 when either is unknown (nothing to tell candidates apart by)."""
    if value is None or best is None or value <= 0 or best <= 0:
        return 0.0
    return max(0.0, math.log2(value / best))
