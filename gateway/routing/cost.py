"""This request's cost on one deployment, from one draw of its belief: time, money, failure, and the policy's score.

The formulas are docs/routing.md's ("The score"): time at the policy's estimate for the predicted answer length, the
prompt's cached part neither prefilled nor priced in full, a failure costing its own moment and the best other
deployment's time, an answer invalid for the request's kind counted as a failure by ``quality_weight``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from gateway.config import DeploymentConfig
from gateway.policies import PolicyConfig
from gateway.routing.draws import STANDARD_NORMAL, Draw, new_tuple
from gateway.routing.overrides import Sort


def valid_rate(valid: int, judged: int) -> float:
    """The chance an answer is valid for a request's kind, from the kind's judged answers and five pseudo-valid ones:
    an honest provider's one invalid answer among its first few must not cost it a kind of traffic for a window."""
    return (valid + 5) / (judged + 5)


@dataclass(slots=True)
class Shape:
    """What the cost of a request depends on: its prompt, its expected answer, and per deployment (by name) what
    of the prompt is cached there and how likely a valid answer is.

    Never changed once made (one per plan). Not frozen, so that its written-out ``__init__`` compiles (``Prior``'s
    precedent): the generated one stays interpreted and sets each field through ``object.__setattr__``."""

    prompt_tokens: int
    output_tokens: float
    """The predicted answer length (``gateway.routing.lengths``), capped by ``max_tokens``."""
    cached: Mapping[str, int] = field(default_factory=dict)
    """Prompt tokens expected from each deployment's cache (``affinity.cached_on``; absent: none)."""
    valid: Mapping[str, float] = field(default_factory=dict)
    """Each deployment's chance of an answer valid for this request's kind (``valid_rate``; absent: 1)."""

    def __init__(
        self,
        prompt_tokens: int,
        output_tokens: float,
        cached: Mapping[str, int] | None = None,
        valid: Mapping[str, float] | None = None,
    ) -> None:
        # A field left out (None) gets its ``default_factory``'s value, as the generated ``__init__`` gives it.
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.cached = {} if cached is None else cached
        self.valid = {} if valid is None else valid


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
    quality: float = 1.0
    """The valid rate's exponent inside the failure term (the policy's ``quality_weight``)."""

    @classmethod
    def of(cls, policy: PolicyConfig, sort: Sort | None = None) -> Weights:
        quantiles = policy.estimate == "quantile"
        ttft_z = STANDARD_NORMAL.inv_cdf(min(max(policy.ttft_quantile, 0.01), 0.99)) if quantiles else None
        spt_z = STANDARD_NORMAL.inv_cdf(min(max(policy.tps_quantile, 0.01), 0.99)) if quantiles else None
        weights = (policy.time_weight, policy.ttft_weight, policy.throughput_weight, policy.price_weight)
        # A sort ranks by its own term, a little time or price breaking near-ties.
        if sort == "price":
            weights = (0.05, 0.0, 0.0, 1.0)
        elif sort == "throughput":
            weights = (0.0, 0.0, 1.0, 0.05)
        elif sort == "latency":
            weights = (0.0, 1.0, 0.0, 0.05)
        return cls(*weights, policy.failure_weight, ttft_z, spt_z, policy.quality_weight)


class Cost(NamedTuple):
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
    valid: float = 1.0
    """The chance its answer is valid for the request's kind."""


def cost(draw: Draw, deployment: DeploymentConfig, shape: Shape, weights: Weights, prefill_s: float = 0.0) -> Cost:
    """The request's first token, speed, time, price and failure chance on ``deployment`` if ``draw`` is true."""
    f_ttft, f_spt = factors(draw.spread, weights)
    uncached, money, valid = terms(deployment, shape)
    ttft = draw.ttft_s * f_ttft + prefill_s * uncached
    spt = draw.s_per_token * f_spt
    time = ttft + max(0.0, shape.output_tokens - 1) * spt
    fields = (ttft, spt, time, money, draw.failure, draw.failure_s, draw.changed, valid)
    return new_tuple(Cost, fields)  # ``Cost(*fields)``, without its ``__new__``'s Python frame


def terms(deployment: DeploymentConfig, shape: Shape) -> tuple[int, float, float]:
    """What of the request's cost on ``deployment`` no draw changes: its uncached prompt tokens, its price, and its
    chance of a valid answer."""
    cached = min(shape.prompt_tokens, shape.cached.get(deployment.name, 0))
    uncached = shape.prompt_tokens - cached
    cached_price = deployment.price_in if deployment.price_cached_in is None else deployment.price_cached_in
    money = (uncached * deployment.price_in + cached * cached_price + shape.output_tokens * deployment.price_out) / 1e6
    return uncached, money, shape.valid.get(deployment.name, 1.0)


def factors(spread: tuple[float, float], weights: Weights) -> tuple[float, float]:
    """What the policy's estimate (mean or quantile) multiplies a drawn median first token and seconds per token by."""
    s_ttft, s_spt = spread
    ttft = math.exp(s_ttft * s_ttft / 2) if weights.ttft_z is None else math.exp(weights.ttft_z * s_ttft)
    spt = math.exp(s_spt * s_spt / 2) if weights.spt_z is None else math.exp(weights.spt_z * s_spt)
    return ttft, spt


def scores(costs: list[Cost], weights: Weights) -> list[float]:
    """Each cost as the policy scores it, against the others (a failure falls back to the quickest other)."""
    times = [c.time_s for c in costs]
    by_time = sorted(range(len(costs)), key=times.__getitem__)
    epsilon = max([c.money_usd for c in costs], default=0.0) * 0.01 + 1e-12
    quickest, second = by_time[0] if by_time else 0, by_time[1] if len(by_time) > 1 else None
    w_time, w_ttft, w_throughput, w_price = weights.time, weights.ttft, weights.throughput, weights.price
    w_failure, quality, log2 = weights.failure, weights.quality, math.log2
    result = []
    for i, c in enumerate(costs):
        other = quickest if quickest != i else second  # the quickest other
        time_s, failure = c.time_s, c.failure
        fallback = times[other] if other is not None else time_s
        total = w_time * log2((1 - failure) * time_s + failure * (c.failure_s + fallback))
        if w_ttft:
            total += w_ttft * log2(c.ttft_s)
        if w_throughput:
            total += w_throughput * log2(c.s_per_token)
        total += w_price * log2(c.money_usd + epsilon)
        good = max(1.0 - failure, 0.01) * math.pow(max(c.valid, 0.01), quality)
        result.append(total + w_failure * log2(1.0 / good))
    return result
