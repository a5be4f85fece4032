"""Whether a look is worth what it costs the request that carries it (``gateway.routing.choose``).

A look (a race or a shadow beside the leader on a stream) is billed: the attempt that does not answer is drained and
paid for. It is worth the requests its answer informs times what it may teach each of them (the knowledge gradient,
``belief_look.gains``), counted apart for the two things an answer may find:

- **the level as heard** (stayed, drifted since): the answer only sharpens it, and what it teaches lasts as long as it
  stays news (``news_s``): one answer takes ``v² / (v + s²)`` off the level's variance ``v`` (the hazard's chance of a
  change since last heard counted in ``v``, with where a change lands), and unheard that much grows back, by
  ``DRIFT`` a second and by the hazard's share of a landing (its variance and its distance², once every
  ``Hazard.every_s``, the model's learned hazard: ``gateway.routing.belief_hazard``);
- **a level changed since** (the hazard's branch): where the answer finds it better than the leader, the request
  finds a new leader. The find is worth the requests it serves that would not have been served by it otherwise: not
  the new level's whole life (``Hazard.every_s`` on average: counted so, every look pays at any real pace), but the time
  by which this look finds it sooner than the next would (``news_in_s``: as long as the deployment went unheard,
  or between its last two answers, the interval at which looks and traffic reach it), at most that life.

The requests informed are the model's pace of streamed requests times those horizons. A look's cost (``look_cost``)
is what it adds to this request by the policy's score: the look's bill beside the leader's (the attempt that does not
answer is drained: read to ``DRAIN_EVENTS``, not to the end), and for a race the time it saves or loses
(``race_time``). A look is taken where its worth exceeds its cost; ``RACE_BUDGET`` stays its bound.
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist
from typing import NamedTuple

from gateway.config import DeploymentConfig
from gateway.routing.belief import Belief
from gateway.routing.belief_look import gains
from gateway.routing.belief_runs import METRICS, mix
from gateway.routing.cost import Cost, Shape, Weights
from gateway.routing.priors import DRIFT, Prior

_NORMAL = NormalDist()
DRAIN_EVENTS = 64
"""Events read from a drained loser (most providers send a token or two per event): enough for its tokens/s."""
DRAIN_MAX_S = 5.0
"""At most this long past its first token: a slow streamer measured over a few seconds is measured."""


def news_s(belief: Belief, prior: Prior, now: float) -> float:
    """How long one answer's lesson about the level as heard lasts: the variance it takes off, over the rate the
    variance grows back unheard (drift, and the hazard's share of where a change lands); the longer of the two
    metrics'. Never heard: as long as the level lasts (``Hazard.every_s``)."""
    every = belief.hazard.every_s
    if not belief.runs or belief.heard_at is None:
        return every
    p = belief.changed(now)
    landings = belief._new_runs(prior)
    longest = 0.0
    for metric in METRICS:
        mean, var = belief.level(now, metric)
        landing, landing_var = mix(landings, metric)
        distance2 = math.pow(mean - landing, 2.0)
        v = (1 - p) * var + p * landing_var + p * (1 - p) * distance2
        taken = v * v / (v + belief.spread2[metric])
        regrowth = DRIFT + (landing_var + distance2) / every
        longest = max(longest, taken / regrowth)
    return longest


class Race(NamedTuple):
    """A race's expected time, and the chance the explored deployment's first token wins it."""

    time_s: float
    explored_first: float


def race_time(
    explored: Belief, explored_prior: Prior, leader: Belief, leader_prior: Prior, e: Cost, lead: Cost, now: float
) -> Race:
    """The race of the explored deployment against the leader: both start at once, the first token wins and its
    stream answers. Its first token is the earlier of two log-normals (``E[min]``, Margrabe's exchange formula); the
    answer streams on the explored one as often as it starts first."""
    s_e = explored.expected(now, explored_prior).spread[0]
    s_l = leader.expected(now, leader_prior).spread[0]
    sigma = math.sqrt(s_e * s_e + s_l * s_l)
    stream_e, stream_l = e.time_s - e.ttft_s, lead.time_s - lead.ttft_s
    if sigma <= 0.0 or e.ttft_s <= 0.0 or lead.ttft_s <= 0.0:  # no spread: by speed alone
        return Race(lead.time_s, 0.5) if e.s_per_token <= lead.s_per_token else Race(math.inf, 0.5)
    d1 = (math.log(lead.ttft_s / e.ttft_s) + sigma * sigma / 2) / sigma
    first_token = lead.ttft_s * _NORMAL.cdf(-d1) + e.ttft_s * _NORMAL.cdf(d1 - sigma)
    # Medians' log difference over the spread: the chance the explored one's first token comes first.
    explored_first = _NORMAL.cdf((math.log(lead.ttft_s) - s_l * s_l / 2 - math.log(e.ttft_s) + s_e * s_e / 2) / sigma)
    return Race(first_token + stream_l + explored_first * (stream_e - stream_l), explored_first)


def drained_usd(c: Cost, deployment: DeploymentConfig, shape: Shape) -> float:
    """What an attempt drained beside the answer is billed: its prompt, and the tokens read before the drain stops
    (``DRAIN_EVENTS``, or ``DRAIN_MAX_S`` of its stream at ``c``'s speed), not the whole answer."""
    read = min(shape.output_tokens, DRAIN_EVENTS, 1 + DRAIN_MAX_S / max(c.s_per_token, 1e-9))
    return c.money_usd - (shape.output_tokens - read) * deployment.price_out / 1e6


def look_cost(e: Cost, lead: Cost, e_drained: float, lead_drained: float, weights: Weights, race: Race | None) -> float:
    """What a look adds to this request's score: a shadow's drained bill beside the leader's answer; a race's, the
    winner's answer and the loser's drained bill (the explored one answering as often as its first token wins), and
    its time against the leader's alone."""
    if race is None:
        extra = e_drained
    else:
        q = race.explored_first
        extra = q * (e.money_usd + lead_drained - lead.money_usd) + (1 - q) * e_drained
    epsilon = max(e.money_usd, lead.money_usd) * 0.01 + 1e-12
    cost = weights.price * math.log2((lead.money_usd + extra + epsilon) / (lead.money_usd + epsilon))
    if race is not None and race.time_s > 0.0 and lead.time_s > 0.0:
        cost += weights.time * math.log2(race.time_s / lead.time_s)
    return cost


def worth(
    belief: Belief,
    prior: Prior,
    deployment: DeploymentConfig,
    lead: Cost,
    shape: Shape,
    weights: Weights,
    now: float,
    rng: random.Random,
    pace: float,
) -> float:
    """What a look at ``deployment`` is worth, in the policy's score summed over the requests it informs (``pace``
    streamed requests a second): the sharpened level's gain over its news time, the found change's over the time it
    is found sooner."""
    _, stayed, changed = gains(belief, prior, deployment, lead, shape, weights, now, rng)
    return pace * (stayed * news_s(belief, prior, now) + changed * min(belief.hazard.every_s, news_in_s(belief, now)))


def news_in_s(belief: Belief, now: float) -> float:
    """How long until traffic would tell of a deployment: the time a look tells it sooner. As long as it has gone
    unheard, and as long as between its last two answers: one answered once after a long silence (a look's answer,
    the first after an outage) is not heard again soon because it was heard just now, while one serving requests
    is heard within moments."""
    if belief.heard_at is None:
        return 1e6
    return max(now - belief.heard_at, belief.gap_s or 0.0, 1e-3)
