"""A deployment's prefill: first token = base + uncached prompt tokens × seconds per token, as a small regression.

A Bayesian linear regression of an answer's first token on its uncached prompt tokens, with a normal prior on the
base and on the slope (``SLOPE`` seconds per token, as unsure as it is large). Both are learned together, so
that answers of one prompt size alone cannot tell them apart: they fix only ``base + size × slope``, and the
prior decides the split (the slope stays near ``SLOPE`` instead of falling to zero while the base absorbs the
whole prefill). Answers of varied sizes (a cold prompt, then a warm turn that sent a few hundred new tokens) tell
them apart, and the slope is learned.

Answers are log-normal, so an answer's noise is its own size times ``SPREAD`` (a 15 ms warm turn weighs far more
per second of residual than a 1.5 s one). While nothing is heard the covariance grows as a log level's variance
does (``DRIFT`` per second, relative), so an old fit yields to new answers.

The base is read from the belief's level (``gateway.routing.belief``: it tracks jumps, this does not); only the
slope is read from here: an answer's prefill is taken out of its first token before the level hears it, and a
request's predicted first token adds the slope × its uncached tokens on that deployment (``gateway.routing.cost``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.routing.priors import DRIFT, SPREAD

SLOPE = 1e-4
"""Seconds per uncached prompt token before any answer tells (10k tokens/s); its prior sd is as large."""
_FLOOR_S = 1e-3
"""The smallest first token an answer's noise is scaled by (a 0 s answer would otherwise weigh infinitely)."""


@dataclass(frozen=True, slots=True)
class Prefill:
    """The posterior of (base, slope): means and covariance ``((var_b, cov), (cov, var_s))``, and when last heard."""

    base: float = 1.0
    slope: float = SLOPE
    var_base: float = 1.0
    cov: float = 0.0
    var_slope: float = SLOPE**2
    heard_at: float | None = None

    @classmethod
    def start(cls, base_s: float) -> Prefill:
        """The prior, its base ``base_s`` (the belief's level when first heard) as unsure as it is large."""
        return cls(base=base_s, var_base=base_s**2)

    @property
    def s_per_token(self) -> float:
        """The slope's posterior mean, never below zero: what a request's uncached tokens add to its first token."""
        return max(0.0, self.slope)

    def observe(self, now: float, uncached_tokens: int, ttft_s: float) -> Prefill:
        """The posterior after one answer: ``ttft_s`` for ``uncached_tokens`` tokens not found cached."""
        grow = 1.0 + DRIFT * max(0.0, now - self.heard_at) if self.heard_at is not None else 1.0
        vb, c, vs = self.var_base * grow, self.cov * grow, self.var_slope * grow
        x = float(uncached_tokens)
        residual = ttft_s - (self.base + x * self.slope)
        # The Kalman gain of one observation y = b + x s + noise: P h / (h' P h + noise), h = (1, x).
        pb, ps = vb + x * c, c + x * vs
        total = pb + x * ps + (SPREAD * max(ttft_s, _FLOOR_S)) ** 2
        gb, gs = pb / total, ps / total
        return Prefill(
            self.base + gb * residual,
            self.slope + gs * residual,
            vb - gb * pb,
            c - gb * ps,
            max(vs - gs * ps, 1e-30),
            now,
        )

    def prefill_s(self, uncached_tokens: int) -> float:
        """The prefill of ``uncached_tokens`` tokens (seconds, at the slope's mean)."""
        return self.s_per_token * uncached_tokens

    def sd_slope(self) -> float:
        """How unsure the slope is (seconds per token)."""
        return math.sqrt(max(self.var_slope, 0.0))
