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
What the level hears of such an answer is what the regression knows of its base (``unprefilled``): the base at the
slope's mean, as unsure as the slope makes it (a cold prompt's first token at an unlearned slope says little of the
base), and never above the whole first token (``at_most_its_answer``: a prefill is never negative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from gateway.routing.belief_runs import Run
from gateway.routing.priors import DRIFT, SPREAD

SLOPE: Final = 1e-4
"""Seconds per uncached prompt token before any answer tells (10k tokens/s); its prior sd is as large."""
_ROOT_2PI: Final = math.sqrt(2.0 * math.pi)
_SLOPE2: Final = SLOPE**2
_FLOOR_S: Final = 1e-3
"""The smallest first token an answer's noise is scaled by (a 0 s answer would otherwise weigh infinitely)."""


@dataclass(slots=True)
class Prefill:
    """The posterior of (base, slope): means and covariance ``((var_b, cov), (cov, var_s))``, and when last heard.

    Never changed in place: ``observe`` returns the posterior after, and a belief's copies share the one it holds.
    Not frozen for its ``__init__``: written out, compiled, a native method, where a frozen dataclass's generated one
    stays interpreted and sets each field through ``object.__setattr__`` (one is made per answer)."""

    base: float = 1.0
    slope: float = SLOPE
    var_base: float = 1.0
    cov: float = 0.0
    var_slope: float = _SLOPE2
    heard_at: float | None = None

    def __init__(
        self,
        base: float = 1.0,
        slope: float = SLOPE,
        var_base: float = 1.0,
        cov: float = 0.0,
        var_slope: float = _SLOPE2,
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

    def unprefilled(self, uncached_tokens: int, ttft_s: float) -> tuple[float, float]:
        """An answer's first token ``ttft_s`` without the prefill of its ``uncached_tokens`` (never below a fifth of
        it), and the log variance the slope's own uncertainty lends that base: ``(tokens × sd_slope / base)²`` (the
        delta method). A base read off a long prompt at an unlearned slope is mostly guess: the level is told so."""
        base = max(ttft_s - self.prefill_s(uncached_tokens), 0.2 * ttft_s)
        if base <= 0.0:
            return base, 0.0
        return base, uncached_tokens * uncached_tokens * max(self.var_slope, 0.0) / (base * base)

    def prefill_s(self, uncached_tokens: int) -> float:
        """The prefill of ``uncached_tokens`` tokens (seconds, at the slope's mean)."""
        return self.s_per_token * uncached_tokens

    def sd_slope(self) -> float:
        """How unsure the slope is (seconds per token)."""
        return math.sqrt(max(self.var_slope, 0.0))


def at_most_its_answer(runs: list[Run], base: float | None, unsure: float, ttft: float | None, noise: float) -> None:
    """Each run told that this answer's base, read at ``base`` (log) with ``unsure`` log variance (``unprefilled``),
    is at most the answer's whole first token ``ttft`` (log): a prefill is never negative. Runs whose level lies
    above it lose weight and move down; where the slope is known the base was read close and this tells nothing.

    The base's likelihood of one run's level ``L`` (the answer's own noise ``noise``, a normal here): the read base
    ``N(u; base, unsure)`` cut at ``u <= ttft``, ``u ~ N(L, noise)``, integrated over ``u``: the normal already heard
    (``update_all``, noise plus ``unsure``) times ``Φ(a − b L)``, whose assumed-density step is closed: moved and
    narrowed by the normal's hazard (a probit's moments), weighed by the chance it gives."""
    if not unsure > 0.0 or base is None or ttft is None:  # no prefill taken out: the answer is its base
        return
    w = unsure / (unsure + noise)
    tau = math.sqrt(unsure * noise / (unsure + noise))
    if not tau > 0.0:
        return
    a, b = (ttft - (1.0 - w) * base) / tau, w / tau
    for run in runs:
        mean, var = run.mean0, run.var0
        s = math.sqrt(1.0 + b * b * var)
        z = (a - b * mean) / s
        chance = 0.5 * math.erfc(-z / math.sqrt(2.0))
        # φ(z) / Φ(z); where Φ underflows, its asymptote (to the term that keeps ratio × (z + ratio) below 1)
        ratio = math.exp(-0.5 * z * z) / _ROOT_2PI / chance if chance > 1e-300 else -z - 1.0 / z + 2.0 / z**3
        run.mean0 = mean - b * var / s * ratio
        shrunk = var - b * b * var * var / (s * s) * ratio * (z + ratio)
        run.var0 = shrunk if shrunk > 1e-6 else 1e-6  # as ``student.update_all`` floors a bound's step
        run.weight *= chance if chance > 1e-12 else 1e-12
