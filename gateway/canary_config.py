"""The ``[canary]`` keys: scheduled task checks per deployment, within a daily token budget.

Part of the config (``gateway.config`` holds it as ``GatewayConfig.canary``; absent: no canary), in a
module of its own so that the config reader stays one screen per section. ``gateway.canary`` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.toml_reader import TableReader


@dataclass(frozen=True, slots=True)
class CanaryConfig:
    """Usage (config.toml)::

    [canary]
    interval_s = 600        # every deployment answers one built-in task this often
    daily_tokens = 200000   # tokens (prompt and output) the canary may spend per UTC day, per gateway process
    """

    interval_s: float = 600.0
    daily_tokens: int = 200_000


def parse_canary(table: TableReader) -> CanaryConfig:
    default = CanaryConfig()
    canary = CanaryConfig(
        interval_s=table.number("interval_s", default.interval_s, positive=True),
        daily_tokens=table.integer("daily_tokens", default.daily_tokens, minimum=0),
    )
    table.finish()
    return canary
