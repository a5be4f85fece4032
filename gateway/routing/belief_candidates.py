"""The belief router's candidates: the drawn order of deployments made into the plan's ``Candidate`` list.

Around the draw (``gateway.routing.choose``) sit two rules. A deployment that breaks one of the policy's soft
constraints (``filters.broken``) is neither drawn nor explored: it follows the others as a fallback, unless every
one breaks one. A session's turn that may stay on its cached prompt is not explored away from it, since no look
at another repays the cache: it follows the order the beliefs expect.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.config import PolicyConfig, ProviderConfig
from gateway.routing.choose import Budget, Choice, Option, choose, mean_costs
from gateway.routing.cost import Shape, Weights, scores, valid_rate
from gateway.routing.filters import broken
from gateway.routing.health import RouterState
from gateway.routing.hedge import hedge_after
from gateway.routing.overrides import ProviderPreferences
from gateway.routing.plan import Candidate, RouteRequest, candidate_from_fields
from gateway.samples import RequestKind
from gateway.stats import StatsSnapshot
from gateway.types import RouteReason


def kind_terms(
    options: Sequence[Option],
    snapshot: StatsSnapshot,
    model: str,
    policy: PolicyConfig,
    preferences: ProviderPreferences,
    kind: RequestKind | None,
    now: float,
) -> tuple[dict[str, float], list[tuple[str, ...]]]:
    """Each deployment's chance of an answer valid for this request's kind (the shared window's verdicts of that
    kind), and the soft constraints it breaks (``filters.broken``)."""
    valid: dict[str, float] = {}
    breaks = []
    for option in options:
        d = option.deployment
        summary = snapshot.summaries.get((model, d.name))  # ``snapshot.get``, without its Python frame
        counts = summary.valid_counts(kind) if summary is not None else (0, 0)
        rate = valid[d.name] = valid_rate(counts[0], counts[1])  # not ``*counts``: a generic call when compiled
        fails, oks = option.belief.failure(now)
        success = oks / (fails + oks)
        # ``broken`` reads the attempts only where the policy bounds the success rate: a Python property, skipped.
        attempts = summary.attempts if summary is not None and policy.min_success_rate is not None else 0
        found = broken(d, summary, policy, preferences, kind, success=(success, attempts), valid=(rate, counts[1]))
        breaks.append(found)
    return valid, breaks


def choose_for(
    options: Sequence[Option],
    breaks: Sequence[tuple[str, ...]],
    shape: Shape,
    weights: Weights,
    now: float,
    rng: random.Random,
    *,
    may_race: bool,
    budget: Budget | None,
    model: str,
    explore: bool = True,
) -> Choice:
    """``choose`` over the deployments that keep the constraints, those that break one after them (best expected
    first); without ``explore``, the order the beliefs expect: no draw, no look."""
    keep = [i for i, b in enumerate(breaks) if not b] or list(range(len(options)))
    means = mean_costs(options, shape, weights, now)
    inner = [options[i] for i in keep]
    inner_means = [means[i] for i in keep]
    if explore:
        kept = choose(inner, shape, weights, now, rng, may_race=may_race, budget=budget, model=model, means=inner_means)
    else:
        by_mean = scores(inner_means, weights)
        kept = Choice(tuple(sorted(range(len(inner)), key=by_mean.__getitem__)), tuple(inner_means))
    if len(keep) == len(options):
        return kept
    rest = [i for i in range(len(options)) if i not in keep]
    by_cost = dict(zip(rest, scores([means[i] for i in rest], weights), strict=True))
    rest.sort(key=by_cost.__getitem__)
    return Choice(
        (*[keep[j] for j in kept.order], *rest),
        tuple(means),
        race=tuple(keep[j] for j in kept.race),
        shadow=keep[kept.shadow] if kept.shadow is not None else None,
        explored=kept.explored,
        cold=kept.cold,
    )


def candidates_of(
    request: RouteRequest,
    policy: PolicyConfig,
    options: list[Option],
    choice: Choice,
    order: list[int],
    race: tuple[int, ...],
    snapshot: StatsSnapshot,
    now: float,
    *,
    providers: dict[str, ProviderConfig],
    state: RouterState,
    stay: str | None,
    steered: bool,
) -> list[Candidate]:
    """The plan's candidates in ``order``, each with its reason, predicted time, learned deadlines and when to hedge
    it (a race's members at once). ``stay``: the deployment holding the session's cache; ``steered``: the request's
    preferences steer it."""
    model = request.model.name
    hedging = request.stream and policy.hedging
    costs, racing, last = choice.costs, len(race), len(order) - 1
    # Measured to the end if it loses (drained): a look's first, or every racer of a cold start.
    # A shadow's leader answers the request under its own reason (the look runs beside it, outside the candidates).
    shadowed = choice.shadow is not None
    explored = max(max(1, racing - 1) if choice.explored and not shadowed else 0, racing if choice.cold else 0)
    deadlines_of, tails, summaries = state.deadlines.of, state.tails, snapshot.summaries
    candidates = []
    for position, i in enumerate(order):
        deployment, prefill = options[i].deployment, options[i].belief.prefill
        name = deployment.name
        predicted = costs[i]
        after: float | None = None
        if position < racing:
            after = 0.0 if position + 1 < racing else None
        elif hedging and position < last:
            backup = costs[order[position + 1]]
            extra = max(0.0, backup.time_s - backup.ttft_s - (predicted.time_s - predicted.ttft_s))
            after = hedge_after(policy, snapshot, model, name, backup.ttft_s + extra, tails, now)
        reason: RouteReason = "fallback"
        if position < explored:
            reason = "explore"
        elif position == 0 or position < racing:  # the leader, first or racing its look
            reason = "override" if steered else "affinity" if name == stay else "best-score"
        deadlines = deadlines_of((model, name), policy, summaries.get((model, name)), now)
        candidates.append(
            candidate_from_fields(  # every field, in order (``gateway.frozen``)
                deployment,
                providers[deployment.provider],
                reason,
                model,
                after,  # hedge_after_s
                predicted.time_s,  # predicted_s
                deadlines.first_token_s if deadlines is not None else None,  # first_token_timeout_s
                deadlines.idle_s if deadlines is not None else None,  # idle_timeout_s
                1.0 / prefill.s_per_token if prefill is not None and prefill.s_per_token > 0 else None,
                shadowed and position == 0,  # shadowed
            )
        )
    return candidates
