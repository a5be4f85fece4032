"""What the attempts running at a deployment say of it, told as it changes, not again at every plan.

A plan reads each deployment's belief told of the attempts under way there (``BeliefRouter._option``): each
stream begun since the belief was last heard is an answer (its first token, and its pace so far once
``PACE_TOKENS`` are in), the longest wait for a first token and the slowest of the other streams are lower
bounds ("the value is at least t"). Told afresh at every plan, that was a change-point step per stream per
deployment per plan: at 63 open streams over five deployments, two thirds of a request's routing. Here each
deployment keeps two things, made again only when what they read changed:

- ``told``: a copy of the belief told each stream begun since it was last heard, once per piece of evidence:
  its first token when a plan first sees it, its pace so far when a plan first finds it readable (one told
  with both at once is told them as a pair). Begun afresh when the belief hears (a new answer: no stream then
  running is "since" any more). A stream's pace is not read again as it goes on: its answer, when it ends,
  says the rest, and a stream slowing down meanwhile is the slowness bound's to show once the belief hears.
- ``view``: ``told`` (or the belief) with the two bounds, as the plan reads it: found again when an attempt
  there started, came to its first token or ended (``RunningViews.moved``), when ``told`` heard a stream, or
  when the belief heard; between, plans read the view found last. The bounds then are those of that moment:
  a wait grows without an event, but the deployment an overdue attempt matters for is the one plans keep
  sending to, and each attempt sent there is an event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.routing.belief import Belief
from gateway.routing.belief_attempts import RunningAttempt, pace_so_far, slowness_of
from gateway.routing.priors import Prior
from gateway.types import DeploymentKey


@dataclass(slots=True)
class Running:
    """One deployment's belief as its running attempts tell it, kept between plans."""

    base: Belief
    """The belief as heard, that ``told`` and ``view`` were made from."""
    answers: int
    heard_at: float | None
    told: Belief | None = None
    """The belief told the streams begun since it was last heard (None: none has told anything yet)."""
    said: dict[int, tuple[RunningAttempt, bool]] = field(default_factory=dict)
    """Each stream told so far (by its attempt's key in the router): the attempt, and whether its pace was too."""
    view: Belief | None = None
    stale: bool = True
    """An attempt there started, streamed or ended since ``view`` was found."""


class RunningViews:
    """Per deployment, its belief as the attempts running there tell it (``Running``), for ``BeliefRouter``."""

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
        """``belief`` as the ``attempts`` running at ``key`` tell it now (the same object where they say nothing)."""
        running = self.kept.get(key)
        heard = belief.heard_at
        fresh = running is not None and running.base is belief and running.answers == belief.answers
        if running is None or not fresh or running.heard_at != heard:
            running = self.kept[key] = Running(belief, belief.answers, heard)
        since = heard if heard is not None else -math.inf
        said = running.said
        told = running.told
        paced: set[int] = set()
        for at, attempt in attempts.items():
            if attempt.first_at is None or attempt.started_at < since:
                continue
            before = said.get(at)
            ttft: float | None
            spt: float | None
            if before is not None and before[0] is attempt:
                if before[1]:
                    paced.add(at)
                    continue
                pace = pace_so_far(attempt, now, bytes_per_token)
                if pace is None or pace[1] is None:
                    continue
                ttft, spt = None, pace[1]  # its first token told already: its pace alone
            else:
                pace = pace_so_far(attempt, now, bytes_per_token)
                if pace is None:
                    continue
                ttft, spt = pace
            said[at] = (attempt, spt is not None)
            if spt is not None:
                paced.add(at)
            if told is None:
                told = running.told = belief.copy()
            told.observe(now, prior, ttft, spt, uncached_tokens=None, mixed=False)
            running.view = None
        if running.view is not None and not running.stale:
            return running.view
        # Past what is expected of it (its own level, or the prior while it was never heard): a bound either way.
        # A stream read by its pace is one answer, not a bound besides (its evidence would count twice).
        expected = belief.expected(now, None if belief.answers else prior)
        waited, slow = 0.0, 0.0
        for at, attempt in attempts.items():
            if attempt.first_at is None:
                wait = now - attempt.started_at
                waited = wait if wait > waited else waited
            elif at not in paced:
                slowness = slowness_of(attempt, now, bytes_per_token)
                slow = slowness if slowness > slow else slow
        ttft_bound = waited if waited > expected.ttft_s else None
        spt_bound = slow if slow > expected.s_per_token else None
        source = told if told is not None else belief
        if ttft_bound is not None or spt_bound is not None or told is not None:
            view = source.bounded(now, prior, ttft_bound, spt_bound, base=belief)
        else:
            view = belief
        running.view, running.stale = view, False
        return view
