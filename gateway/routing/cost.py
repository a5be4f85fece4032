"""This request's cost on one deployment, from one draw of its belief: time, money, failure, and the policy's score.

``time ≈ first token + prefill of the uncached prompt + (expected output tokens − 1) × seconds per token``,
at the policy's estimate: the mean of the log-normal answers (``estimate = "mean"``) or its quantiles
(``ttft_quantile``, ``tps_quantile``). ``money`` is the request's price at the deployment's rates.
A failure costs its own moment and the best other deployment's time (the attempt loop's fallback).
The score is the policy's weighted sum of log2 of each (``gateway.policies``): lower is better, and
only differences between deployments matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from gateway.config import DeploymentConfig
from gateway.policies import PolicyConfig
from gateway.routing.belief import Draw
from gateway.routing.overrides import Sort

_Z = NormalDist()


@dataclass(frozen=True, slots=True)
class Shape:
    """What the cost of a request depends on: its prompt (uncached part), its expected answer, streamed or not."""

    prompt_tokens: int
    output_tokens: float
    """The predicted answer length (``gateway.routing.lengths``), capped by ``max_tokens``."""
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Weights:
    """The policy's weights, or those of a request's ``sort``."""

    time: float
    ttft: float
    throughput: float
    price: float
    failure: float
    ttft_z: float | None
    """None: predict means; else the standard normal quantile of ``ttft_quantile``."""
    spt_z: float | None

    @classmethod
    def of(cls, policy: PolicyConfig, sort: Sort | None = None) -> Weights:
        quantiles = policy.estimate == "quantile"
        ttft_z = _Z.inv_cdf(min(max(policy.ttft_quantile, 0.01), 0.99)) if quantiles else None
        spt_z = _Z.inv_cdf(min(max(policy.tps_quantile, 0.01), 0.99)) if quantiles else None
        failure = policy.failure_weight
        if sort == "price":
            return cls(0.05, 0.0, 0.0, 1.0, failure, ttft_z, spt_z)
        if sort == "throughput":
            return cls(0.0, 0.0, 1.0, 0.05, failure, ttft_z, spt_z)
        if sort == "latency":
            return cls(0.0, 1.0, 0.0, 0.05, failure, ttft_z, spt_z)
        return cls(
            policy.time_weight,
            policy.ttft_weight,
            policy.throughput_weight,
            policy.price_weight,
            failure,
            ttft_z,
            spt_z,
        )


@dataclass(frozen=True, slots=True)
class Cost:
    """One draw's prediction for this request."""

    ttft_s: float
    s_per_token: float
    time_s: float
    """If it answers."""
    money_usd: float
    failure: float
    failure_s: float = 0.0
    changed: bool = False
    """From a draw of a level new since last heard (``Draw.changed``)."""


def cost(draw: Draw, deployment: DeploymentConfig, shape: Shape, weights: Weights, prefill_s: float = 0.0) -> Cost:
    """The request's first token, speed, time, price and failure chance on ``deployment`` if ``draw`` is true."""
    s_ttft, s_spt = draw.spread
    if weights.ttft_z is None:
        ttft = draw.ttft_s * math.exp(s_ttft * s_ttft / 2)
    else:
        ttft = draw.ttft_s * math.exp(weights.ttft_z * s_ttft)
    if weights.spt_z is None:
        spt = draw.s_per_token * math.exp(s_spt * s_spt / 2)
    else:
        spt = draw.s_per_token * math.exp(weights.spt_z * s_spt)
    uncached = max(0, shape.prompt_tokens - shape.cached_tokens)
    ttft += prefill_s * uncached
    time = ttft + max(0.0, shape.output_tokens - 1) * spt
    cached_price = deployment.price_in if deployment.price_cached_in is None else deployment.price_cached_in
    money = (
        uncached * deployment.price_in + shape.cached_tokens * cached_price + shape.output_tokens * deployment.price_out
    ) / 1e6
    return Cost(ttft, spt, time, money, draw.failure, draw.failure_s, draw.changed)


def scores(costs: list[Cost], weights: Weights) -> list[float]:
    """Each cost as the policy scores it, against the others (a failure falls back to the best other)."""
    times = sorted(range(len(costs)), key=lambda i: costs[i].time_s)
    epsilon = max((c.money_usd for c in costs), default=0.0) * 0.01 + 1e-12
    result = []
    for i, c in enumerate(costs):
        others = [j for j in times[:2] if j != i]
        fallback = costs[others[0]].time_s if others else c.time_s
        expected = (1 - c.failure) * c.time_s + c.failure * (c.failure_s + fallback)
        score = weights.time * math.log2(expected)
        if weights.ttft:
            score += weights.ttft * math.log2(c.ttft_s)
        if weights.throughput:
            score += weights.throughput * math.log2(c.s_per_token)
        score += weights.price * math.log2(c.money_usd + epsilon)
        score += weights.failure * math.log2(1.0 / max(1.0 - c.failure, 0.01))
        result.append(score)
    return result
