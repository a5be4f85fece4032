"""Text for the page: escaping and number formats.

Every piece of text that reaches the page from outside this package (model, deployment and
provider names are config text; store reasons and URLs come from the environment) goes
through ``esc``, in element content and in attribute values alike (it quotes both kinds of
quote). Numbers are formatted here, so that nothing else needs escaping.
"""

from __future__ import annotations

import html
import math


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def clip(text: str, limit: int) -> str:
    """Shorten a name to ``limit`` characters for a tight label (before escaping, never after)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


NO_SAMPLES = "no samples in the window"
"""What a deployment without samples shows instead of its figures (never a dash that reads as zero)."""
UNMEASURED = "no samples"
"""A figure the window's samples do not give (e.g. no streamed answer yet, so no TTFT)."""


def seconds(value: float | None) -> str:
    if value is None:
        return UNMEASURED
    if value < 1.0:
        return f"{value * 1000:,.0f} ms"
    return f"{value:,.2f} s" if value < 10 else f"{value:,.1f} s"


def speed(value: float | None) -> str:
    if value is None:
        return UNMEASURED
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def percent(value: float | None) -> str:
    if value is None:
        return UNMEASURED
    if value >= 0.9995 or value == 0:
        return f"{value * 100:.0f}%"
    return f"{value * 100:.1f}%"


def price(value: float | None) -> str:
    """USD per 1M tokens, e.g. ``$0.59``; a zero one is ``free``, one the config lacks ``not configured``."""
    if value is None:
        return "not configured"
    if value == 0:
        return "free"
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.3g}"


def duration(window_s: int) -> str:
    if window_s % 3600 == 0:
        return f"{window_s // 3600} h"
    if window_s % 60 == 0:
        return f"{window_s // 60} min"
    return f"{window_s} s"


def money(value: float) -> str:
    """USD for one request, e.g. ``$0.00036``: two significant digits, however small."""
    if value <= 0:
        return "free"
    if value >= 1:
        return f"${value:,.2f}"
    rounded = float(f"{value:.2g}")  # two significant digits (0.0000999 is 0.00010, not 0.000100)
    decimals = 1 - math.floor(math.log10(rounded))
    return f"${rounded:.{decimals}f}"


def plural(count: int, noun: str) -> str:
    """``1 sample``, ``2 samples``, ``1,024 samples``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
