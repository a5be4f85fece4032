"""Whether a look is worth what it costs the request that carries it (``choose``).

Its worth is what it teaches each request (``belief_look.gains``) times the requests its answer informs: the
model's pace of streams times how long the lesson lasts (``news_s`` for the level as heard, ``news_in_s`` for a
change it finds). Its cost is the drained attempt's bill and, for a race, the time it saves or loses, both by the
policy's score. See docs/routing.md ("What the router knows").
"""

from __future__ import annotations

import math
import random
from typing import NamedTuple

from gateway.config import DeploymentConfig
from gateway.routing.belief import Belief
from gateway.routing.belief_look import gains
from gateway.routing.belief_runs import METRICS, mix
from gateway.routing.cost import Cost, Shape, Weights
from gateway.routing.draws import STANDARD_NORMAL
from gateway.routing.priors import DRIFT, Prior

DRAIN_EVENTS = 64
"""Events read from a drained loser: enough for its tokens/s."""
DRAIN_MAX_S = 5.0
"""At most this long past its first token: a few seconds measure even a slow streamer."""


def news_s(belief: Belief, prior: Prior, now: float) -> float:
    """How long one answer's lesson about the level as heard lasts: the variance it takes off over the rate the
    variance grows back unheard, the longer of the two metrics'. Never heard: the level's expected life."""
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
    """The explored deployment raced against the leader: the first token wins and its stream answers. The first
    token is the earlier of two log-normals (``E[min]`` by Margrabe's formula)."""
    s_e = explored.expected(now, explored_prior).spread[0]
    s_l = leader.expected(now, leader_prior).spread[0]
    sigma = math.sqrt(s_e * s_e + s_l * s_l)
    stream_e, stream_l = e.time_s - e.ttft_s, lead.time_s - lead.ttft_s
    if sigma <= 0.0 or e.ttft_s <= 0.0 or lead.ttft_s <= 0.0:  # no spread: by speed alone
        return Race(lead.time_s, 0.5) if e.s_per_token <= lead.s_per_token else Race(math.inf, 0.5)
    d1 = (math.log(lead.ttft_s / e.ttft_s) + sigma * sigma / 2) / sigma
    first_token = lead.ttft_s * STANDARD_NORMAL.cdf(-d1) + e.ttft_s * STANDARD_NORMAL.cdf(d1 - sigma)
    log_gap = math.log(lead.ttft_s) - s_l * s_l / 2 - math.log(e.ttft_s) + s_e * s_e / 2
    explored_first = STANDARD_NORMAL.cdf(log_gap / sigma)
    return Race(first_token + stream_l + explored_first * (stream_e - stream_l), explored_first)


def drained_usd(c: Cost, deployment: DeploymentConfig, shape: Shape) -> float:
    """What an attempt drained beside the answer is billed: its prompt and the tokens read before the drain stops."""
    read = min(shape.output_tokens, DRAIN_EVENTS, 1 + DRAIN_MAX_S / max(c.s_per_token, 1e-9))
    return c.money_usd - (shape.output_tokens - read) * deployment.price_out / 1e6


def look_cost(e: Cost, lead: Cost, e_drained: float, lead_drained: float, weights: Weights, race: Race | None) -> float:
    """What a look adds to this request's score: the extra bill (a shadow's drain; a race's winner and drained
    loser) and, for a race, its time against the leader's alone."""
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
    streamed requests a second)."""
    _, stayed, changed = gains(belief, prior, deployment, lead, shape, weights, now, rng)
    return pace * (stayed * news_s(belief, prior, now) + changed * min(belief.hazard.every_s, news_in_s(belief, now)))


def news_in_s(belief: Belief, now: float) -> float:
    """How much sooner a look tells of a deployment than traffic would: the longer of the time it has gone unheard
    and the gap between its last two answers (one heard once after a silence is not heard again soon)."""
    if belief.heard_at is None:
        return 1e6
    return max(now - belief.heard_at, belief.gap_s or 0.0, 1e-3)
