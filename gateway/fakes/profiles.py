"""Provider profiles shaped on published serving figures, for the demo's and benchmarks' fake providers.

Why: a demo in which every provider is equally fast shows nothing, and one with made-up
numbers teaches the wrong intuitions. Each profile below takes its figures from the public
measurements collected in ``provider-profiles.csv`` (beside this module; its header states the
sources), read from that file at import:

- Source A: a public benchmark of 10 providers serving one model (GLM 5.3 Flash), 600
  requests each at concurrency 1, streaming, 256-token ceiling, 2026-09-03: tokens/s p50 and
  the p95/p99 floors (the speed 95% / 99% of responses reached), TTFT p95, end-to-end p99.
- Source B: a public index of provider medians across all the models each serves: median
  tokens/s, median TTFT and median blended price per 1M tokens.

The names are invented on purpose: a profile combines the trait it demonstrates from one
row with figures from another, so it describes no real provider. Each number used names the
row it comes from.

Spread is log-normal, as published latency and speed distributions are: the fake provider
multiplies TTFT and tokens/s by ``lognormvariate(0, sigma)`` per request, so the median stays
the published p50 and ``sigma`` is fitted so the tails land near the published p95 (TTFT)
and the p95/p99 floors (tokens/s).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from importlib import resources

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
    invalid_tool_json_rate: float = 0.0
    """Share of tool calls whose arguments are not JSON (a quality fault: fast and whole, but broken)."""

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
            invalid_tool_json_rate=self.invalid_tool_json_rate,
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


PROFILES_CSV = resources.files(__package__).joinpath("provider-profiles.csv")


def published_rows() -> dict[tuple[str, str], dict[str, str]]:
    """The rows of ``provider-profiles.csv`` by (source, provider); an unpublished figure is ""."""
    text = PROFILES_CSV.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return {(row["source"], row["provider"]): row for row in csv.DictReader(io.StringIO("\n".join(lines)))}


_ROWS = published_rows()


def _a(provider: str) -> tuple[float, float, float, float]:
    """Source A: tokens/s p50, p95 floor, p99 floor, TTFT p95 (s)."""
    row = _ROWS[("A", provider)]
    return float(row["tps_p50"]), float(row["tps_p95_floor"]), float(row["tps_p99_floor"]), float(row["ttft_p95_s"])


def _b(provider: str) -> tuple[float, float]:
    """Source B: median TTFT (s) and median blended price (USD per 1M tokens)."""
    row = _ROWS[("B", provider)]
    return float(row["ttft_p50_s"]), float(row["price_per_1m_usd"])


_A_NEBIUS = _a("Nebius")
_A_BASETEN = _a("Baseten")
_A_MODAL_TTFT_P95 = _a("Modal")[3]
_A_TELNYX = _a("Telnyx")
_A_DEEPINFRA = _a("DeepInfra")
_A_NOVITA = _a("Novita AI")
_A_PARASAIL = _a("Parasail")
_B_DEEPINFRA = _b("DeepInfra")
_B_PARASAIL = _b("Parasail")
_B_TOGETHER = _b("Together")
_B_AZURE = _b("Azure")
_B_GOOGLE_AI_STUDIO = _b("Google AI Studio")

DEMO_PROFILES: tuple[ProviderProfile, ...] = (
    ProviderProfile(
        name="nimble",
        trait="fast start, slow stream, bad tool calls",
        # TTFT: B DeepInfra (fastest median), A Modal (lowest p95). Speed: A Novita AI. Price: B DeepInfra.
        figures=ServingFigures(
            tps_p50=_A_NOVITA[0],
            tps_p95_floor=_A_NOVITA[1],
            tps_p99_floor=_A_NOVITA[2],
            ttft_p50_s=_B_DEEPINFRA[0],
            ttft_p95_s=_A_MODAL_TTFT_P95,
            price_per_1m=_B_DEEPINFRA[1],
            # Not published either: the fast-but-broken provider that loses tool-using traffic, not plain chat.
            invalid_tool_json_rate=0.3,
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
