"""What one look at a deployment may teach: the knowledge gradient ``choose`` spends a look by.

The expected improvement on the leader's score of where the deployment's belief would stand after one answer
(docs/routing.md, "What the router knows"). It is most of a looking plan's work, so it is written out for mypyc:
float fields rather than tuples, terms found once per look, normals made as ``random.Random.gauss`` makes them.
Every float equals the plain form's (a ``Belief.draw`` per draw, ``cost.score``); the tests hold it to that.
"""

from __future__ import annotations

import math
import random

from gateway.config import DeploymentConfig
from gateway.routing.belief import Belief
from gateway.routing.belief_runs import Run
from gateway.routing.cost import Cost, Shape, Weights, factors, terms
from gateway.routing.draws import normal_pair, pick
from gateway.routing.priors import DRIFT, Prior

GAIN_DRAWS = 16
"""Draws that estimate what a look may teach: a cost of the computation, not a fact of the world."""


class Hypothesis:
    """One hypothesis about the level now, as a look's answer would weigh it: its log weight, then per metric its
    mean, its variance with the answers', that variance's log, and the share of an answer's distance its mean moves
    by. ``odds`` is scratch for ``posterior_mean``."""

    __slots__ = ("log_weight", "mean0", "mean1", "var0", "var1", "log_var0", "log_var1", "learn0", "learn1", "odds")

    def __init__(
        self,
        log_weight: float,
        mean0: float,
        mean1: float,
        var0: float,
        var1: float,
        log_var0: float,
        log_var1: float,
        learn0: float,
        learn1: float,
    ) -> None:
        self.log_weight = log_weight
        self.mean0 = mean0
        self.mean1 = mean1
        self.var0 = var0
        self.var1 = var1
        self.log_var0 = log_var0
        self.log_var1 = log_var1
        self.learn0 = learn0
        self.learn1 = learn1
        self.odds = 0.0


def gains(
    belief: Belief,
    prior: Prior,
    deployment: DeploymentConfig,
    leader: Cost,
    shape: Shape,
    weights: Weights,
    now: float,
    rng: random.Random,
) -> tuple[float, float, float]:
    """What one look at ``deployment`` may teach against the ``leader``'s cost (the knowledge gradient), then its
    two parts: from the level as heard and from a level changed since (``worth`` weighs them apart)."""
    changed_runs = belief._new_runs(prior)
    spread = belief.spread()
    spread2 = [s * s for s in spread]
    sd0, sd1 = math.sqrt(spread2[0]), math.sqrt(spread2[1])
    (stayed_chance, changed_chance), hypotheses = look_terms(belief, now, changed_runs, spread2)
    stayed_levels, stayed_mean, stayed_sd = belief.sampling(belief.runs or changed_runs, now)
    changed_levels, changed_mean, changed_sd = belief.sampling(changed_runs, now, True)
    _, money, valid = terms(deployment, shape)
    f_ttft, f_spt = factors(spread, weights)
    tokens = max(0.0, shape.output_tokens - 1)
    epsilon = max(money, leader.money_usd) * 0.01 + 1e-12
    fallback = belief.failures.failure_s + leader.time_s
    price, valid_term = weights.price * math.log2(money + epsilon), max(valid, 0.01) ** weights.quality
    stays, fails, lead_failure_s, lead_ttft, lead_spt, lead_price, lead_failure = _leader_terms(
        leader, weights, epsilon
    )
    w_time, w_ttft, w_throughput, w_failure = weights.time, weights.ttft, weights.throughput, weights.failure
    uniform, log2 = rng.random, math.log2
    state = vars(rng)  # holds ``gauss_next``, the second normal of the last pair ``gauss`` made
    kept = state["gauss_next"]
    carrying = kept is not None
    carry = float(kept) if carrying else 0.0
    total = stayed_total = changed_total = 0.0
    for k in range(GAIN_DRAWS):
        # Half the draws from each branch, weighted by its chance, so that rare changes are not missed.
        if k % 2:
            levels, failure_mean, failure_sd, chance = changed_levels, changed_mean, changed_sd, changed_chance
        else:
            levels, failure_mean, failure_sd, chance = stayed_levels, stayed_mean, stayed_sd, stayed_chance
        run = pick(levels, uniform())
        # Five normals as five ``gauss`` calls make them: Box-Muller pairs, the sine's kept for the next call.
        if carrying:
            z0 = carry
            z1, z2 = normal_pair(uniform)
            z3, z4 = normal_pair(uniform)
        else:
            z0, z1 = normal_pair(uniform)
            z2, z3 = normal_pair(uniform)
            z4, carry = normal_pair(uniform)
        carrying = not carrying
        ttft = math.exp(run.mean0 + z0 * run.sd0)
        spt = math.exp(run.mean1 + z1 * run.sd1)
        failure = min(0.99, max(0.0, failure_mean + z2 * failure_sd))
        a0, a1 = math.log(ttft) + (0.0 + z3 * sd0), math.log(spt) + (0.0 + z4 * sd1)
        moved_ttft, moved_spt = posterior_mean(hypotheses, a0, a1)
        ttft = moved_ttft * f_ttft
        spt = moved_spt * f_spt
        time = ttft + tokens * spt
        mine = w_time * log2((1 - failure) * time + failure * fallback)
        theirs = w_time * log2(stays + fails * (lead_failure_s + time))
        if w_ttft:
            mine += w_ttft * log2(ttft)
            theirs += lead_ttft
        if w_throughput:
            mine += w_throughput * log2(spt)
            theirs += lead_spt
        mine += price
        theirs += lead_price
        mine += w_failure * log2(1.0 / (max(1.0 - failure, 0.01) * valid_term))
        theirs += lead_failure
        improvement = max(0.0, theirs - mine) * chance
        total += improvement
        if k % 2:
            changed_total += improvement
        else:
            stayed_total += improvement
    state["gauss_next"] = carry if carrying else None
    return 2 * total / GAIN_DRAWS, 2 * stayed_total / GAIN_DRAWS, 2 * changed_total / GAIN_DRAWS


def _leader_terms(lead: Cost, weights: Weights, epsilon: float) -> tuple[float, ...]:
    """The parts of the leader's score (``cost.score``, the draw's time as its fallback) that no draw changes."""
    good = max(1.0 - lead.failure, 0.01) * max(lead.valid, 0.01) ** weights.quality
    return (
        (1 - lead.failure) * lead.time_s,
        lead.failure,
        lead.failure_s,
        weights.ttft * math.log2(lead.ttft_s) if weights.ttft else 0.0,  # as ``score``: only where weighed
        weights.throughput * math.log2(lead.s_per_token) if weights.throughput else 0.0,
        weights.price * math.log2(lead.money_usd + epsilon),
        weights.failure * math.log2(1.0 / good),
    )


def look_terms(
    belief: Belief, now: float, changed_runs: list[Run], spread2: list[float]
) -> tuple[tuple[float, float], list[Hypothesis]]:
    """Each side's chance (stayed, changed) and the level now as one hypothesis per run as heard (weighted ``1 − p``,
    ``p`` the chance of a change since last heard) and per place a change may land (weighted ``p``)."""
    p = belief.changed(now) if belief.runs else 1.0
    age = DRIFT * (now - belief.heard_at) if belief.heard_at is not None else 0.0
    s0, s1 = spread2[0], spread2[1]
    stayed = changed = 0.0
    result: list[Hypothesis] = []
    for r in belief.runs:
        weight = (1.0 - p) * r.weight
        stayed += weight
        result.append(_hypothesis(weight, r.mean0, r.mean1, r.var0 + age, r.var1 + age, s0, s1))
    for r in changed_runs:
        weight = p * r.weight
        changed += weight
        result.append(_hypothesis(weight, r.mean0, r.mean1, r.var0, r.var1, s0, s1))
    return (stayed, changed), result


def _hypothesis(
    weight: float, mean0: float, mean1: float, var0: float, var1: float, s0: float, s1: float
) -> Hypothesis:
    v0, v1 = var0 + s0, var1 + s1
    log_weight, learn0, learn1 = math.log(max(weight, 1e-12)), var0 / v0, var1 / v1
    return Hypothesis(log_weight, mean0, mean1, v0, v1, math.log(v0), math.log(v1), learn0, learn1)


def posterior_mean(hypotheses: list[Hypothesis], a0: float, a1: float) -> tuple[float, float]:
    """The level's posterior mean (seconds, per metric) after one answer ``(a0, a1)`` (logs), over every hypothesis.
    Plain loops rather than ``max`` and ``sum`` over lists; ``math.pow(x, 2.0)`` is what ``x ** 2`` computes."""
    top = 0.0
    first = True
    for h in hypotheses:
        x = (
            h.log_weight
            - 0.5 * (math.pow(a0 - h.mean0, 2.0) / h.var0 + h.log_var0)
            - 0.5 * (math.pow(a1 - h.mean1, 2.0) / h.var1 + h.log_var1)
        )
        if first or x > top:
            top = x
            first = False
        h.odds = x
    total = 0.0
    for h in hypotheses:
        odd = math.exp(h.odds - top)
        h.odds = odd
        total += odd
    value0 = value1 = 0.0
    for h in hypotheses:
        m0, m1 = h.mean0, h.mean1
        share = h.odds / total
        value0 += share * (m0 + h.learn0 * (a0 - m0))
        value1 += share * (m1 + h.learn1 * (a1 - m1))
    return math.exp(value0), math.exp(value1)
