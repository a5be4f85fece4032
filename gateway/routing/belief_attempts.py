"""The belief router's attempts under way, and what an attempt, running or finished, says of its deployment.

A running stream gives a lower bound on seconds per token (``slowness_of``) or, if begun since the deployment was
last heard, its first token and pace so far (``pace_so_far``); its tokens are estimated from its bytes. ``tell``
tells a belief what a finished attempt says, this replica's or another's (``belief_others``), by one rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.routing.belief import Belief
from gateway.routing.health import FAILURES
from gateway.routing.lengths import LengthKey
from gateway.routing.priors import Prior
from gateway.stats.answers import Answer
from gateway.types import DeploymentKey, StreamProgress

PACE_TOKENS = 8
"""Tokens a running stream must have sent before its pace so far counts as its speed."""


@dataclass(slots=True)
class RunningAttempt:
    """One attempt the router admitted and has not heard the end of."""

    key: DeploymentKey
    started_at: float
    length: tuple[LengthKey, int | None] | None
    """The request's shape and ``max_tokens``, for its answer's length."""
    first_at: float | None = None
    progress: StreamProgress | None = None
    told_in: int = field(default=0, init=False)
    """The running view (``belief_running.Running.told_in``) its stream was told to, 0 for none yet."""
    paced: bool = field(default=False, init=False)
    """Whether its pace was told there too (its first token was, and no more is told of it)."""

    def __init__(
        self,
        key: DeploymentKey,
        started_at: float,
        length: tuple[LengthKey, int | None] | None,
        first_at: float | None = None,
        progress: StreamProgress | None = None,
    ) -> None:
        # Written out so that mypyc compiles it (one per attempt started); the generated ``__init__`` stays interpreted.
        self.key = key
        self.started_at = started_at
        self.length = length
        self.first_at = first_at
        self.progress = progress
        self.told_in = 0
        self.paced = False


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
    """A lower bound on a running stream's seconds per token: its time since the first token over the tokens its
    bytes hold plus the one under way (0.0: not streaming, or its API's bytes per token not learned yet)."""
    progress = attempt.progress
    if progress is None or attempt.first_at is None:
        return 0.0
    per_token = bytes_per_token.get(progress.api)
    if not per_token:
        return 0.0
    return (now - attempt.first_at) / (progress.received_bytes / per_token + 1.0)


def bytes_per_token(learned: dict[str, float], progress: StreamProgress, output_tokens: int) -> None:
    """Learn, into ``learned``, a finished stream's API's bytes per output token (its events' envelope): a moving
    average over about twenty streams, its first stream taken as it is."""
    api = progress.api
    seen = progress.received_bytes / output_tokens
    known = learned.get(api)
    learned[api] = seen if known is None else known + (seen - known) / 20


def answer_pair(answer: Answer, expected: tuple[float, float] | None) -> tuple[float | None, float | None]:
    """A finished answer's first token and seconds per token, for its deployment's belief.

    A stream whose tokens came in one piece streamed them between its first token and its end. An answer not
    streamed is split as ``expected`` (the belief's medians) says, both parts scaled to its whole time; ``expected``
    is read only for an answer with no first token."""
    n = answer.output_tokens or 0
    ended = answer.attempt_s
    if answer.ttft_s is not None:
        if answer.tokens_per_s:
            return answer.ttft_s, 1.0 / answer.tokens_per_s
        if n >= 2 and ended is not None:  # a body sent in one piece took about a millisecond, not zero
            return answer.ttft_s, max(ended - answer.ttft_s, 1e-3) / (n - 1)
        return answer.ttft_s, None
    if ended is None or ended <= 0 or answer.stream:
        return None, None
    if n < 2 or expected is None:
        return ended, None
    ttft_s, s_per_token = expected
    scale = ended / (ttft_s + (n - 1) * s_per_token)
    return ttft_s * scale, s_per_token * scale


def tell(belief: Belief, prior: Prior, answer: Answer, now: float, elapsed_s: float | None) -> bool:
    """Tell ``belief`` what one finished attempt says: an answer's pair (a drained one's too), a failure, or a
    raced loser's first token (without one, a lower bound on it). False when it says nothing of the deployment."""
    if answer.outcome == "ok" or answer.drained:
        medians = None
        if answer.ttft_s is None:  # an answer not streamed is split as the belief expects it
            m0, m1, _, _ = belief.predicted(now, prior)
            medians = math.exp(m0), math.exp(m1)
        ttft, spt = answer_pair(answer, medians)
        belief.observe(now, prior, ttft, spt, uncached_tokens=answer.uncached_tokens)
        belief.failed(now, False)
    elif answer.outcome in FAILURES:
        belief.failed(now, True, elapsed_s)
    elif answer.outcome == "client_cancelled" and answer.hedged:
        if answer.ttft_s is not None:
            # Its first token came (with the winner's, a moment late): a first token heard, its pace unknown. Told as
            # a bound it would lift a level barely heard far above what was measured.
            belief.observe(now, prior, answer.ttft_s, None, uncached_tokens=answer.uncached_tokens)
        elif elapsed_s:
            belief.observe(now, prior, at_least=(elapsed_s, None))
    else:
        return False
    return True
