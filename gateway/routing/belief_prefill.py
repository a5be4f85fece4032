"""A deployment's prefill: first token = base + uncached prompt tokens × seconds per token.

A Bayesian linear regression with a normal prior on both (the slope's is ``SLOPE``, as unsure as it is large):
one prompt size leaves the split to the prior, varied sizes teach the slope. The belief's level tracks the base
(it follows jumps; this does not), so only the slope is read from here. See docs/routing.md ("What the router
knows").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from gateway.routing.belief_runs import Run
from gateway.routing.priors import DRIFT, SPREAD

SLOPE: Final = 1e-4
"""Seconds per uncached prompt token before any answer tells; its prior sd is as large."""


@dataclass(slots=True)
class Prefill:
    """The posterior of (base, slope): means, covariance and when last heard.

    Treated as immutable (a belief's copies share it): ``observe`` returns a new one. Not frozen, so that its
    written-out ``__init__`` compiles."""

    base: float = 1.0
    slope: float = SLOPE
    var_base: float = 1.0
    cov: float = 0.0
    var_slope: float = SLOPE**2
    heard_at: float | None = None

    def __init__(
        self,
        base: float = 1.0,
        slope: float = SLOPE,
        var_base: float = 1.0,
        cov: float = 0.0,
        var_slope: float = SLOPE**2,
        heard_at: float | None = None,
    ) -> None:
        self.base = base
        self.slope = slope
        self.var_base = var_base
        self.cov = cov
        self.var_slope = var_slope
        self.heard_at = heard_at

    @classmethod
    def start(cls, base_s: float) -> Prefill:
        """The prior, its base ``base_s`` as unsure as it is large."""
        return cls(base=base_s, var_base=base_s**2)

    @property
    def s_per_token(self) -> float:
        """The slope's posterior mean, never below zero."""
        return max(0.0, self.slope)

    def observe(self, now: float, uncached_tokens: int, ttft_s: float) -> Prefill:
        """The posterior after one answer: ``ttft_s`` for ``uncached_tokens`` tokens not found cached."""
        grow = 1.0 + DRIFT * max(0.0, now - self.heard_at) if self.heard_at is not None else 1.0
        vb, c, vs = self.var_base * grow, self.cov * grow, self.var_slope * grow
        x = float(uncached_tokens)
        residual = ttft_s - (self.base + x * self.slope)
        # The Kalman gain of one observation y = b + x s + noise: P h / (h' P h + noise), h = (1, x).
        pb, ps = vb + x * c, c + x * vs
        total = pb + x * ps + (SPREAD * max(ttft_s, 1e-3)) ** 2  # a 0 s answer would weigh infinitely
        gb, gs = pb / total, ps / total
        return Prefill(
            self.base + gb * residual,
            self.slope + gs * residual,
            vb - gb * pb,
            c - gb * ps,
            max(vs - gs * ps, 1e-30),
            now,
        )

    def unprefilled(self, uncached_tokens: int, ttft_s: float) -> tuple[float, float]:
        """The answer's base (its first token less the prefill, at least a fifth of it) and the log variance the
        slope's uncertainty lends that base: ``(tokens × slope sd / base)²`` by the delta method."""
        base = max(ttft_s - self.s_per_token * uncached_tokens, 0.2 * ttft_s)
        if base <= 0.0:
            return base, 0.0
        return base, uncached_tokens * uncached_tokens * max(self.var_slope, 0.0) / (base * base)


def at_most_its_answer(runs: list[Run], base: float | None, unsure: float, ttft: float | None, noise: float) -> None:
    """Tell each run that the answer's base (read at ``base`` with ``unsure`` log variance) is at most its whole
    first token ``ttft``: a prefill is never negative. The factor ``Φ(a − b L)`` this adds to the likelihood of a
    level ``L`` is taken by its closed assumed-density step (a probit's moments), all logs."""
    if not unsure > 0.0 or base is None or ttft is None:  # no prefill taken out
        return
    w = unsure / (unsure + noise)
    tau = math.sqrt(unsure * noise / (unsure + noise))
    if not tau > 0.0:
        return
    a, b = (ttft - (1.0 - w) * base) / tau, w / tau
    erfc = math.erfc  # looked up once: compiled, ``math.erfc`` is a module attribute read at every use
    for run in runs:
        mean, var = run.mean0, run.var0
        s = math.sqrt(1.0 + b * b * var)
        z = (a - b * mean) / s
        chance = 0.5 * erfc(-z / math.sqrt(2.0))
        # φ(z) / Φ(z); where Φ underflows, its asymptotic series
        ratio = math.exp(-0.5 * z * z) / math.sqrt(math.tau) / chance if chance > 1e-300 else -z - 1.0 / z + 2.0 / z**3
        run.mean0 = mean - b * var / s * ratio
        shrunk = var - b * b * var * var / (s * s) * ratio * (z + ratio)
        run.var0 = shrunk if shrunk > 1e-6 else 1e-6  # the floor ``student`` uses for a bound
        run.weight *= chance if chance > 1e-12 else 1e-12
