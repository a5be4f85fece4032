"""Context windows: which deployments a prompt fits, configured (``context_window``) or learned from 400s.

A deployment's window is the smaller of its configured one and what its ``context_length_exceeded`` answers
stated (docs/routing.md, "Context windows"). The prompt's estimate (the body's bytes / 4) counts the JSON's
syntax as tokens and runs high, hence ``SKIP_MARGIN``.
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

    def learn(self, key: DeploymentKey, limit: int) -> None:
        """Remember the limit a provider stated (the smallest, where it stated several)."""
        known = self.learned.get(key)
        if known is None or limit < known:
            self.learned[key] = limit

    def window(self, model: str, deployment: DeploymentConfig) -> int | None:
        learned = self.learned.get((model, deployment.name))
        configured = deployment.context_window
        if learned is None or configured is None:
            return configured if learned is None else learned
        return min(learned, configured)

    def fits(self, model: str, deployment: DeploymentConfig, prompt_tokens: int) -> bool:
        window = self.window(model, deployment)
        return window is None or prompt_tokens <= window * SKIP_MARGIN
