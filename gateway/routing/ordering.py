"""How near-equal and thinly measured leaders are ordered, and what a hedge's backup costs.

Adjustments to the score order that depend on a ranking as a whole, on the request's shape
and on load (requests in flight), kept apart from the router so that each reads on its own:

- ``spread_near_equal``: scores within ``tie_band`` are near-equal; the one with fewer requests
  in flight goes first (replicas do not stampede one provider), but for a long answer only the
  deployments that stream about as fast as the best share such a tie;
- ``slow_start``: a leader measured on a few answers takes no more requests in flight than
  answers back while another plausible deployment can serve;
- ``backup_time``: what starting the next candidate as a hedge would cost the client.
"""

from __future__ import annotations

import math
import random

from gateway.routing.ranking import Ranked
from gateway.routing.scored import Prediction, RequestShape

SLOW_START_ANSWERS = 4
"""Below this many answers, a deployment gets no more attempts in flight than answers back while another can serve."""
TIE_STREAM_RATIO = 1.25
"""For a long answer, a near-equal deployment streaming more than this many times slower than the best is no tie."""


def spread_near_equal(
    rows: list[Ranked], band: float, rng: random.Random | None, shape: RequestShape | None = None
) -> list[Ranked]:
    """Among the leaders within ``band`` of the best score, fewer requests in flight go first.

    For a long answer (one whose predicted stream outlasts some leader's first token), a deployment
    streaming more than ``TIE_STREAM_RATIO`` times slower than the best is no tie: a slow stream's
    error grows with the answer, and an 800-token answer sent there on a coin flip costs seconds.
    """
    if len(rows) < 2 or rows[0].scored.violations or not rows[0].known:
        return rows
    best = rows[0].scored.ranked_by
    # The leading run only: under a price-led sort an unmeasured row can sit between measured
    # ones, and the leaders must stay a prefix so that ``rest`` is every other row exactly once.
    head = []
    for r in rows:
        scored = r.scored
        if scored.violations or not r.known or not scored.ranked_by <= best + band:
            break
        head.append(r)
    rest = rows[len(head) :]
    # A deployment measured on a few answers does not share a tie: its few answers are being judged.
    kept: list[Ranked] = [head[0]]
    thin: list[Ranked] = []
    for r in head[1:]:
        (thin if is_thin(r) else kept).append(r)
    head = kept
    rest = thin + rest
    if shape is not None and len(head) > 1:
        head, slow = _long_answer_ties(head, shape)
        rest = slow + rest
    if len(head) < 2:
        return head + rest
    if rng is None:
        head.sort(key=lambda r: r.in_flight)  # stable: score order breaks the remaining ties
    else:
        keyed = [(r.in_flight, rng.random(), i) for i, r in enumerate(head)]
        head = [head[k[2]] for k in sorted(keyed)]
    return head + rest


def _long_answer_ties(head: list[Ranked], shape: RequestShape) -> tuple[list[Ranked], list[Ranked]]:
    """(the near-equal leaders that may share a long answer, the slow streamers among them, in order)."""
    fastest = min((r.scored.prediction.seconds_per_token or math.inf for r in head), default=math.inf)
    if math.isinf(fastest):
        return head, []
    streams = [
        (p.seconds_per_token * shape.output_tokens, p.ttft_s)
        for p in (r.scored.prediction for r in head)
        if p.seconds_per_token is not None and p.ttft_s is not None
    ]
    if not any(stream >= ttft for stream, ttft in streams):
        return head, []  # a short answer for all of them: the first token is what matters
    # The fastest streamer is always kept; a slow one goes behind even if it led the tie by a hair.
    keep: list[Ranked] = []
    slow: list[Ranked] = []
    for r in head:
        fast_enough = (r.scored.prediction.seconds_per_token or math.inf) <= TIE_STREAM_RATIO * fastest
        (keep if fast_enough else slow).append(r)
    return keep, slow


def backup_time(primary: Ranked, backup: Ranked, shape: RequestShape) -> float | None:
    """What starting the backup costs the client: its first token, plus its stream's extra time over the primary's.

    A hedge's race is won on the first token, so a backup that streams slower would turn a late
    first token into a long slow answer: that extra time is part of what waiting on must exceed.
    """
    p, b = primary.scored.prediction, backup.scored.prediction
    if b.ttft_s is None:
        return None
    extra = 0.0
    if p.seconds_per_token is not None and b.seconds_per_token is not None:
        extra = max(0.0, shape.output_tokens * (b.seconds_per_token - p.seconds_per_token))
    return b.ttft_s + extra


def is_thin(row: Ranked) -> bool:
    """Measured here on fewer than ``SLOW_START_ANSWERS`` answers (a deployment known only from the window is not),
    or changed that few answers ago: a leap on one lucky answer is as thin as a cold start."""
    p = row.scored.prediction
    return answers_behind(p) < SLOW_START_ANSWERS and p.source != "window"


def answers_behind(p: Prediction) -> float:
    """The answers its estimate rests on: those since its last change, if one was detected."""
    return min(float(p.answers), p.samples) if p.drift else float(p.answers)


def slow_start(rows: list[Ranked]) -> list[Ranked]:
    """A thin leader with as many attempts in flight as answers yields to the first well-measured contender.

    A deployment that leads on a few answers (a lucky probe, a cold start) would otherwise get
    every request until those requests' answers come back and correct it: at 4 requests/s and
    3 s per answer, a dozen. On probation (thin, and at least as many attempts in flight as
    answers), it waits for its answers while the next deployment that is not thin serves, if
    that one might plausibly be as good (its optimistic score is no worse than the leader's
    ranking score).
    """
    if not rows or not is_thin(rows[0]):
        return rows
    leader = rows[0]
    if leader.in_flight < max(1.0, answers_behind(leader.scored.prediction)):
        return rows
    best = leader.scored.ranked_by
    for index, row in enumerate(rows[1:], start=1):
        if row.scored.violations or row.scored.optimistic > best:
            return rows
        if not is_thin(row):
            return [row, *rows[:index], *rows[index + 1 :]]
    return rows
