"""The processing tier the fake says it served an answer at, as each vendor's answer says it.

OpenAI's answers name the tier they were served at (``service_tier``: ``default`` for a request that asked ``auto``),
Anthropic's in ``usage.service_tier`` (``standard``, or ``priority`` on capacity the account bought). The fake serves
what was asked, and says nothing when nothing was (so that an answer's shape is unchanged for every other test).
"""

from __future__ import annotations

from typing import Any

OPENAI = {"auto": "default", "default": "default", "flex": "flex", "scale": "scale", "priority": "priority"}
ANTHROPIC = {"auto": "standard", "standard_only": "standard"}


def served(body: dict[str, Any], anthropic: bool) -> dict[str, str]:
    """``{"service_tier": ...}`` for the tier a request ``body`` asked for, or ``{}``."""
    asked = body.get("service_tier")
    tier = (ANTHROPIC if anthropic else OPENAI).get(asked) if isinstance(asked, str) else None
    return {"service_tier": tier} if tier is not None else {}


__all__ = ["served"]
