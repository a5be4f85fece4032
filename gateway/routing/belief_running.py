"""What the attempts running at a deployment say of it, kept between plans and remade only when that changes.

Each stream begun since the belief was last heard is an answer, and the longest wait for a first token and the
slowest other stream are lower bounds (docs/routing.md, "What the router knows"). Per deployment, ``told`` is a
copy of the belief told each such stream once per piece of evidence (its first token, then its pace), begun afresh
when the belief hears; ``view`` is ``told`` (or the belief) with the two bounds, found again only when an attempt
there starts, streams or ends (``RunningViews.moved``), or when ``told`` or the belief hears.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gateway.routing.belief import Belief
from gateway.routing.belief_attempts import RunningAttempt, pace_so_far, slowness_of
from gateway.routing.priors import Prior
from gateway.types import DeploymentKey

_TELLINGS = itertools.count(1)
"""Each telling's number (``Running.told_in``): one count for every router's views, so an attempt never reads
another view's telling as its own."""


@dataclass(slots=True)
class Running:
    """One deployment's belief as its running attempts tell it, kept between plans."""

    base: Belief
    """The belief as heard, that ``told`` and ``view`` were made from."""
    answers: int
    heard_at: float | None
    told: Belief | None = None
    told_in: int = 0
    """This telling's number, unique in the process: a stream told here keeps it (``RunningAttempt.told_in``),
    with whether its pace was told too; begun afresh, it takes a new one and no stream is told here yet."""
    view: Belief | None = None
    stale: bool = True
    """An attempt there started, streamed or ended since ``view`` was found."""

    def __init__(self, base: Belief, answers: int, heard_at: float | None) -> None:
        # Written out so that mypyc compiles it; the generated ``__init__`` stays interpreted.
        self.restart(base, answers, heard_at)

    def restart(self, base: Belief, answers: int, heard_at: float | None) -> None:
        """Begin afresh from ``base`` as heard now: as a new ``Running(base, answers, heard_at)``, in place."""
        self.base = base
        self.answers = answers
        self.heard_at = heard_at
        self.told = None
        self.told_in = next(_TELLINGS)
        self.view = None
        self.stale = True


class RunningViews:
    """Per deployment, its belief as the attempts running there tell it."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: dict[DeploymentKey, Running] = {}

    def moved(self, key: DeploymentKey) -> None:
        """An attempt at ``key`` started, came to its first token or ended: its bounds are to be read again."""
        running = self.kept.get(key)
        if running is not None:
            running.stale = True

    def view(
        self,
        key: DeploymentKey,
        belief: Belief,
        prior: Prior,
        attempts: dict[int, RunningAttempt],
        now: float,
        bytes_per_token: dict[str, float],
    ) -> Belief:
        """``belief`` as the ``attempts`` running at ``key`` tell it now (``belief`` itself where they say nothing)."""
        running = self.kept.get(key)
        heard = belief.heard_at
        if running is None:
            running = self.kept[key] = Running(belief, belief.answers, heard)
        elif running.base is not belief or running.answers != belief.answers or running.heard_at != heard:
            running.restart(belief, belief.answers, heard)
        # With no stream there (no first token yet anywhere), nothing is told and no stream is a bound: the longest
        # wait is all there is to read, in one pass (the same maximum, taken in the same order).
        waited = 0.0
        for attempt in attempts.values():
            if attempt.first_at is not None:
                break
            wait = now - attempt.started_at
            waited = wait if wait > waited else waited
        else:
            if running.view is not None and not running.stale:
                return running.view
            return self._bounded(running, belief, prior, now, waited, 0.0)
        since = heard if heard is not None else -math.inf
        telling = running.told_in
        told = running.told
        for attempt in attempts.values():
            if attempt.first_at is None or attempt.started_at < since:
                continue
            ttft: float | None
            spt: float | None
            if attempt.told_in == telling:
                if attempt.paced:
                    continue
                pace = pace_so_far(attempt, now, bytes_per_token)
                if pace is None or pace[1] is None:
                    continue
                ttft, spt = None, pace[1]  # its first token was told already
            else:
                pace = pace_so_far(attempt, now, bytes_per_token)
                if pace is None:
                    continue
                ttft, spt = pace
            attempt.told_in, attempt.paced = telling, spt is not None
            if told is None:
                told = running.told = belief.copy()
            told.observe(now, prior, ttft, spt, uncached_tokens=None, mixed=False)
            running.view = None
        if running.view is not None and not running.stale:
            return running.view
        waited, slow = 0.0, 0.0
        for attempt in attempts.values():
            if attempt.first_at is None:
                wait = now - attempt.started_at
                waited = wait if wait > waited else waited
            elif not (attempt.paced and attempt.told_in == telling):
                slowness = slowness_of(attempt, now, bytes_per_token)
                slow = slowness if slowness > slow else slow
        return self._bounded(running, belief, prior, now, waited, slow)

    def _bounded(
        self, running: Running, belief: Belief, prior: Prior, now: float, waited: float, slow: float
    ) -> Belief:
        """The view found again: ``told`` (or the belief) with the longest wait and the slowest stream as bounds
        where they are past what is expected."""
        # A bound counts only past what is expected; a stream told by its pace is not a bound as well.
        expected = belief.expected(now, None if belief.answers else prior)
        ttft_bound = waited if waited > expected.ttft_s else None
        spt_bound = slow if slow > expected.s_per_token else None
        told = running.told
        source = told if told is not None else belief
        if ttft_bound is not None or spt_bound is not None or told is not None:
            view = source.bounded(now, prior, ttft_bound, spt_bound, base=belief)
        else:
            view = belief
        running.view, running.stale = view, False
        return view
