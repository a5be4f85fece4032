"""Provider profiles shaped on published serving figures, for the demo's and benchmarks' fake providers.

Why: a demo in which every provider is equally fast shows nothing, and one with made-up
numbers teaches the wrong intuitions. Each profile below takes its figures from the public
measurements collected in ``provider-profiles.csv`` (kept beside DESIGN.md, not shipped):

- Source A: a public benchmark of 10 providers serving one model (GLM 5.3 Flash), 600
  requests each at concurrency 1, streaming, 256-token ceiling, 2026-09-03: tokens/s p50 and
  the p95/p99 floors (the speed 95% / 99% of responses reached), TTFT p95, end-to-end p99.
- Source B: a public index of provider medians across all the models each serves: median
  tokens/s, median TTFT and median blended price per 1M tokens.

The names are invented on purpose: a profile combines the trait it demonstrates from one
row with figures from another, so it describes no real provider. Only the few numbers used
are transcribed, each with the row it comes from.

Spread is log-normal, as published latency and speed distributions are: the fake provider
multiplies TTFT and tokens/s by ``lognormvariate(0, sigma)`` per request, so the median stays
the published p50 and ``sigma`` is fitted so the tails land near the published p95 (TTFT)
and the p95/p99 floors (tokens/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.fakes.behavior import FakeBehavior

# Standard normal quantiles: p95/p99 upper tails, and the 5th/1st percentile floors below.
Z95 = 1.6448536269514722
Z99 = 2.3263478740408408
DEFAULT_OUTPUT_TOKENS = 300
"""Answer length when a request sets no ``max_tokens``: long enough that speed, not TTFT, dominates."""


def fit_sigma(median: float, points: list[tuple[float, float]]) -> float:
    """Log-normal sigma fitted (least squares in log space) to a median and (z, value) quantiles.

    An upper tail has ``z > 0`` (TTFT p95: ``(Z95, p95)``); a floor has ``z < 0`` (tokens/s
    p99 floor: ``(-Z99, floor)``). With one point this is exact: ``ln(value/median) / z``.
    """
    numerator = sum(z * math.log(value / median) for z, value in points)
    denominator = sum(z * z for z, _ in points)
    return max(0.0, numerator / denominator)


@dataclass(frozen=True, slots=True)
class ServingFigures:
    """Published-style figures of one provider: what its fake is fitted to."""

    tps_p50: float
    tps_p95_floor: float
    tps_p99_floor: float
    ttft_p50_s: float
    ttft_p95_s: float
    price_per_1m: float
    """Blended USD per 1M tokens (3 input : 1 output, as public indexes blend)."""
    error_rate: float = 0.0
    """Share of requests answered with a 503. Not published by either source: chosen per profile."""

    @property
    def tps_sigma(self) -> float:
        return fit_sigma(self.tps_p50, [(-Z95, self.tps_p95_floor), (-Z99, self.tps_p99_floor)])

    @property
    def ttft_sigma(self) -> float:
        return fit_sigma(self.ttft_p50_s, [(Z95, self.ttft_p95_s)])

    @property
    def price_in(self) -> float:
        """USD per 1M prompt tokens: output priced at 3x input, blended 3:1 back to ``price_per_1m``."""
        return self.price_per_1m / 1.5

    @property
    def price_out(self) -> float:
        return 3 * self.price_in

    def behavior(self, *, seed: int | None = None, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> FakeBehavior:
        """The fake provider's behaviour that reproduces these figures."""
        return FakeBehavior(
            ttft_s=self.ttft_p50_s,
            ttft_jitter=self.ttft_sigma,
            tokens_per_s=self.tps_p50,
            tps_jitter=self.tps_sigma,
            output_tokens=output_tokens,
            status=503 if self.error_rate > 0 else 200,
            error_rate=self.error_rate,
            seed=seed,
        )


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    """A named fake provider: its trait, its figures, and optionally what it turns into later."""

    name: str
    trait: str
    """What this provider demonstrates, in a few words (shown by ``gateway demo``)."""
    figures: ServingFigures
    degraded: ServingFigures | None = None
    """The figures it switches to after the demo's ``--degrade-after`` delay; None: it never changes."""


# The sources' rows, transcribed (provider-profiles.csv): tokens/s p50, p95 floor, p99 floor, TTFT p95 (A);
# TTFT p50 s and blended price USD/1M (B).
_A_NEBIUS = (269.3, 78.8, 39.9, 7.11)
_A_BASETEN = (240.5, 61.6, 22.6, 1.16)
_A_MODAL_TTFT_P95 = 1.09
_A_TELNYX = (184.3, 67.5, 47.3, 1.34)
_A_DEEPINFRA = (69.4, 9.0, 5.0, 6.41)
_A_NOVITA = (60.6, 29.6, 11.6, 3.41)
_A_PARASAIL = (52.4, 22.8, 15.6, 5.54)
_B_DEEPINFRA = (0.377, 0.37)
_B_PARASAIL = (0.414, 0.29)
_B_TOGETHER = (0.446, 0.534)
_B_AZURE = (1.14, 4.19)
_B_GOOGLE_AI_STUDIO = (2.32, 1.13)

DEMO_PROFILES: tuple[ProviderProfile, ...] = (
    ProviderProfile(
        name="nimble",
        trait="fast first token, slow stream",
        # TTFT: B DeepInfra (fastest median), A Modal (lowest p95). Speed: A Novita AI. Price: B DeepInfra.
        figures=ServingFigures(
            tps_p50=_A_NOVITA[0],
            tps_p95_floor=_A_NOVITA[1],
            tps_p99_floor=_A_NOVITA[2],
            ttft_p50_s=_B_DEEPINFRA[0],
            ttft_p95_s=_A_MODAL_TTFT_P95,
            price_per_1m=_B_DEEPINFRA[1],
        ),
    ),
    ProviderProfile(
        name="torrent",
        trait="slow start, fast stream",
        # TTFT: B Google AI Studio (slowest median), A Nebius p95. Speed: A Nebius (fastest). Price: B Google.
        figures=ServingFigures(
            tps_p50=_A_NEBIUS[0],
            tps_p95_floor=_A_NEBIUS[1],
            tps_p99_floor=_A_NEBIUS[2],
            ttft_p50_s=_B_GOOGLE_AI_STUDIO[0],
            ttft_p95_s=_A_NEBIUS[3],
            price_per_1m=_B_GOOGLE_AI_STUDIO[1],
        ),
    ),
    ProviderProfile(
        name="bargain",
        trait="cheapest, but flaky (15% errors)",
        # Parasail in both sources: the slowest median speed of A, the lowest price of B.
        figures=ServingFigures(
            tps_p50=_A_PARASAIL[0],
            tps_p95_floor=_A_PARASAIL[1],
            tps_p99_floor=_A_PARASAIL[2],
            ttft_p50_s=_B_PARASAIL[0],
            ttft_p95_s=_A_PARASAIL[3],
            price_per_1m=_B_PARASAIL[1],
            error_rate=0.15,
        ),
    ),
    ProviderProfile(
        name="steady",
        trait="expensive and steady",
        # Speed and TTFT p95: A Telnyx (the tightest tails of A). TTFT p50 and price: B Azure.
        figures=ServingFigures(
            tps_p50=_A_TELNYX[0],
            tps_p95_floor=_A_TELNYX[1],
            tps_p99_floor=_A_TELNYX[2],
            ttft_p50_s=_B_AZURE[0],
            ttft_p95_s=_A_TELNYX[3],
            price_per_1m=_B_AZURE[1],
        ),
    ),
    ProviderProfile(
        name="fading",
        trait="fast and cheap, then degrades",
        # Before: A Baseten speed and TTFT p95, B Together TTFT p50 and price.
        figures=ServingFigures(
            tps_p50=_A_BASETEN[0],
            tps_p95_floor=_A_BASETEN[1],
            tps_p99_floor=_A_BASETEN[2],
            ttft_p50_s=_B_TOGETHER[0],
            ttft_p95_s=_A_BASETEN[3],
            price_per_1m=_B_TOGETHER[1],
        ),
        # After: A DeepInfra (the worst tails of A), B Google AI Studio's slow TTFT median, 5% errors.
        degraded=ServingFigures(
            tps_p50=_A_DEEPINFRA[0],
            tps_p95_floor=_A_DEEPINFRA[1],
            tps_p99_floor=_A_DEEPINFRA[2],
            ttft_p50_s=_B_GOOGLE_AI_STUDIO[0],
            ttft_p95_s=_A_DEEPINFRA[3],
            price_per_1m=_B_TOGETHER[1],
            error_rate=0.05,
        ),
    ),
)


def profile(name: str) -> ProviderProfile:
    """The demo profile called ``name``; raises ``KeyError`` naming the known ones."""
    for candidate in DEMO_PROFILES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"unknown profile {name!r} (known: {', '.join(p.name for p in DEMO_PROFILES)})")
