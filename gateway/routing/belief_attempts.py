"""The belief router's attempts under way, and what one still running says of its deployment.

``BeliefRouter`` keeps a ``RunningAttempt`` from ``attempt_started`` to ``attempt_finished``; while it
runs, ``plan`` reads from it a lower bound on the deployment's seconds per token (``slowness_of``),
or, for one begun since the deployment was last heard, its first token and pace so far
(``pace_so_far``). A stream's tokens are estimated from its bytes, by its API's bytes per token.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.routing.lengths import LengthKey
from gateway.types import DeploymentKey, StreamProgress

PACE_TOKENS = 8
"""Tokens a running stream must have sent before its pace so far counts as its speed."""


@dataclass(slots=True)
class RunningAttempt:
    """One attempt the router admitted and has not heard the end of: what a running attempt tells its belief."""

    key: DeploymentKey
    started_at: float
    length: tuple[LengthKey, int | None] | None
    """The request's shape and ``max_tokens``, for its answer's length."""
    first_at: float | None = None
    progress: StreamProgress | None = None


def pace_so_far(
    attempt: RunningAttempt, now: float, bytes_per_token: dict[str, float]
) -> tuple[float, float | None] | None:
    """A stream's first token, and its seconds per token so far once a few tokens are in (None: no first token)."""
    if attempt.first_at is None:
        return None
    ttft = attempt.first_at - attempt.started_at
    per_token = bytes_per_token.get(attempt.progress.api) if attempt.progress is not None else None
    if attempt.progress is None or not per_token:
        return ttft, None
    tokens = attempt.progress.received_bytes / per_token - 1.0
    return ttft, (now - attempt.first_at) / tokens if tokens >= PACE_TOKENS else None


def slowness_of(attempt: RunningAttempt, now: float, bytes_per_token: dict[str, float]) -> float:
    """A lower bound on a running stream's seconds per token: its time since the first token over the tokens
    its bytes hold, plus the one under way (0: not streaming, or its API's envelope not learned yet)."""
    progress = attempt.progress
    if progress is None or attempt.first_at is None:
        return 0.0
    per_token = bytes_per_token.get(progress.api)
    if not per_token:
        return 0.0
    return (now - attempt.first_at) / (progress.received_bytes / per_token + 1.0)
