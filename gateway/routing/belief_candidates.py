"""The belief router's candidates: a drawn order of deployments made into the plan's ``Candidate`` list.

``BeliefRouter.plan`` draws the order (``choose_for``, around ``gateway.routing.choose``);
``candidates_of`` dresses each deployment in it for the relay: why it is tried (best, fallback,
explore, override, affinity), what it is predicted to take, its learned first-token and idle
deadlines, and when a hedge should follow it.

Two rules sit around the draw, as the policy and the session ask:

- **Constraints.** A deployment that breaks one of the policy's soft constraints (a price cap, a
  measured first token or speed, success or valid rate for this request's kind: ``filters.broken``)
  is neither drawn nor explored; it follows the others as a fallback (unless every one breaks one).
- **A session's cache.** A turn whose session is bound to a deployment that may serve it goes where
  the beliefs expect it best, its prompt's cache counted (``affinity.cached_on``): no draw, no look.
  Exploring it away would cost the cache's worth, which no look at another repays.
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
) -> tuple[dict[str, float], list[bool]]:
    """Each deployment's chance of an answer valid for this request's kind (the shared window's verdicts of that
    kind), and whether it breaks one of the policy's soft constraints for this request (``judged``)."""
    valid: dict[str, float] = {}
    breaks = []
    for option in options:
        rate, found = judged(option, snapshot, model, policy, preferences, kind, now)
        valid[option.deployment.name] = rate
        breaks.append(bool(found))
    return valid, breaks


def judged(
    option: Option,
    snapshot: StatsSnapshot,
    model: str,
    policy: PolicyConfig,
    preferences: ProviderPreferences,
    kind: RequestKind | None,
    now: float,
) -> tuple[float, tuple[str, ...]]:
    """One deployment's chance of an answer valid for this request's kind, and the soft constraints it breaks
    (``filters.broken``): what a plan reads (``kind_terms``) and what its ranking shows (``belief_rank``)."""
    d = option.deployment
    summary = snapshot.summaries.get((model, d.name))  # ``snapshot.get``, without its Python frame
    counts = summary.valid_counts(kind) if summary is not None else (0, 0)
    rate = valid_rate(*counts)
    fails, oks = option.belief.failure(now)
    success = oks / (fails + oks)
    # Its attempts are read only where the policy bounds the success rate (``broken`` reads them only then): a
    # Python property of the stats' summary, per deployment per plan.
    attempts = summary.attempts if summary is not None and policy.min_success_rate is not None else 0
    return rate, broken(d, summary, policy, preferences, kind, success=(success, attempts), valid=(rate, counts[1]))


def choose_for(
    options: Sequence[Option],
    breaks: Sequence[bool],
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
    """``choose`` over the deployments that keep the constraints, those that break one after them as fallbacks (best
    expected first); without ``explore`` (a session's turn that may stay on its cache), the order the beliefs
    expect, no draw and no look."""
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
        (*(keep[j] for j in kept.order), *rest),
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
    stay: str | None = None,
    steered: bool | None = None,
) -> list[Candidate]:
    """The plan's candidates in ``order``: each with its reason, its predicted times, its learned deadlines, and
    when to hedge it (a race's members at once, a streamed request's others at the tail ``hedge_after`` reads).
    ``stay``: the deployment holding the session's cache (first: the turn stayed there); ``steered``: whether the
    request's preferences steer it (None: read from them)."""
    model = request.model.name
    stream = request.stream
    hedging = stream and policy.hedging
    if steered is None:
        steered = request.preferences.steers
    costs, racing, last = choice.costs, len(race), len(order) - 1
    # Measured to the end if it loses (drained): a look's first, or every racer of a cold start.
    explored = max(max(1, racing - 1) if choice.explored else 0, racing if choice.cold else 0)
    deadlines_of, tails, summaries = state.deadlines.of, state.tails, snapshot.summaries
    candidates = []
    for position, i in enumerate(order):
        deployment = options[i].deployment
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
        elif position == 0:
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
                None,  # prefill_tokens_per_s
            )
        )
    return candidates
