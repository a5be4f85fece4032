"""Context windows: which deployments a prompt fits, configured (``context_window``) or learned from 400s.

The same model is often served with different context limits by different providers (8k here,
128k there). A deployment's window is its configured ``context_window``, else what its own
``context_length_exceeded`` answers stated (the smaller of the two when both are known: the
provider's word is evidence). A request whose estimated prompt is larger skips that deployment,
unless no deployment would be left (then the provider's own 400 tells the client why).

The estimate is cheap (the body's bytes / 4, as ``api.py`` makes it): it counts the JSON's syntax
as tokens, so it runs high, and only a prompt larger than the window by ``SKIP_MARGIN`` skips it. A
prompt that slips through is refused by the provider and moved on by the attempt loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config import DeploymentConfig
from gateway.types import DeploymentKey

SKIP_MARGIN = 1.25
"""A deployment is skipped when the prompt's estimate exceeds its window by this factor."""


@dataclass
class ContextWindows:
    """The windows learned from ``context_length_exceeded`` answers, by (model, deployment)."""

    learned: dict[DeploymentKey, int] = field(default_factory=dict)

    def learn(self, key: DeploymentKey, limit: int) -> bool:
        """Remember the limit a provider stated; True when it is news (for a log line)."""
        known = self.learned.get(key)
        if known is not None and known <= limit:
            return False
        self.learned[key] = limit
        return True

    def window(self, model: str, deployment: DeploymentConfig) -> int | None:
        learned = self.learned.get((model, deployment.name))
        configured = deployment.context_window
        if learned is None or configured is None:
            return configured if learned is None else learned
        return min(learned, configured)

    def fits(self, model: str, deployment: DeploymentConfig, prompt_tokens: int) -> bool:
        window = self.window(model, deployment)
        return window is None or prompt_tokens <= window * SKIP_MARGIN
