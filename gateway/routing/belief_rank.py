"""The belief router's ranking, explained: what each deployment is believed to be now, and how likely it is best.

``rank_beliefs`` builds the ``Ranking`` the explanation endpoint (``GET /v1/gateway/routes``), the
routing trace and the dashboard read. It orders the deployments as the beliefs expect them (the leader
first: the order a request's fallbacks follow; a request's first pick is a draw), and gives every row its
``BeliefView``: the median and spread of its first token and speed, how long ago it was heard from, and
the share of draws in which it is the best for a request of this shape (``choose.chance_best``). Nothing here
decides a route; it reads the beliefs the router keeps.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from gateway.config import ModelConfig, PolicyConfig
from gateway.errors import InvalidRequest
from gateway.routing.apis import speaking
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.choose import Counts, Option, chance_best, mean_costs
from gateway.routing.cost import Cost, Shape, Weights, scores, valid_rate
from gateway.routing.filters import allowed, as_preferred, broken
from gateway.routing.lengths import LengthSource, shape_of
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.plan import SessionRoute
from gateway.routing.ranking import BeliefView, Ranked, Ranking
from gateway.routing.scored import Prediction, RequestShape, Scored, ScoreParts, Uncertainty
from gateway.samples import Endpoint, RequestKind
from gateway.stats import StatsSnapshot

BEST_DRAWS = 64
"""Draws behind each deployment's chance of being best (its resolution: 1/64; each draws every deployment once)."""


def rank_beliefs(
    router: BeliefRouter,
    model: ModelConfig,
    *,
    endpoint: Endpoint | None = None,
    prompt_tokens: int = 500,
    max_tokens: int | None = None,
    preferences: ProviderPreferences = NO_PREFERENCES,
    pinned: str | None = None,
    session: SessionRoute | None = None,
    kind: RequestKind | None = None,
) -> Ranking:
    """``model``'s deployments for a request of this shape, leader first, each with its belief (no side effects).

    ``session`` is accepted for ``ServingRouter.rank``'s signature; the ranking holds no cache terms yet, so
    every deployment is predicted as the session-less request."""
    del session
    policy = router.config.policy_for(model)
    now = router.clock()
    snapshot = router.stats.snapshot()
    deployments = allowed(speaking(model, endpoint, pinned), preferences, router._providers)
    length = shape_of(model.name, max_tokens)
    forecast = router.lengths.forecast(length, max_tokens, float(policy.default_output_tokens))
    expected = forecast.mean  # as the plan reads it (``Lengths.expected``)
    told = forecast.source in ("learned", "share")
    source: LengthSource = forecast.source if told else "request" if max_tokens else "default"
    shape = Shape(prompt_tokens, expected)
    weights = Weights.of(policy, preferences.sort)
    options = [router._option(model.name, d.name, d, snapshot, now) for d in deployments]
    means = mean_costs(options, shape, weights, now)
    totals = scores(means, weights) if means else []
    parts = _parts(means, weights)
    best = chance_best(options, shape, weights, now, random.Random(0), BEST_DRAWS) if options else []
    violations = [_violations(model.name, option, snapshot, policy, preferences, kind, now) for option in options]
    # As a plan orders them: a fixed policy in the config's order; else a deployment that breaks a soft constraint
    # follows those that keep them.
    order = list(range(len(options)))
    if policy.ranking != "fixed":
        order.sort(key=lambda i: (bool(violations[i]), not options[i].belief.answers, totals[i]))
    order = as_preferred(order, deployments, preferences)
    if not order and not preferences.allow_fallbacks:
        raise InvalidRequest(
            f"'provider.order' names no deployment of model '{model.name}' and allow_fallbacks is false",
            param="provider.order",
        )
    rows = [
        _ranked(router, model.name, options[i], means[i], parts[i], violations[i], best[i], policy, snapshot, now)
        for i in order
    ]
    rows.sort(key=lambda r: not r.available)  # stable: unavailable ones last, order kept
    counts = router.counts.get(model.name, Counts())
    return Ranking(
        model,
        policy,
        RequestShape(endpoint or "chat", prompt_tokens, round(expected), source, kind),
        tuple(rows),
        snapshot,
        requests=counts.requests,
        probes=counts.explored,
        races=counts.races,
        cold_starts=counts.cold_starts,
        shadows=counts.shadows,
        extra_attempts=counts.shares()[1] if counts.requests else 0.0,
    )


def _parts(means: list[Cost], weights: Weights) -> list[ScoreParts]:
    """Each deployment's score split into its terms, each 0 for the best on it (the score is linear in the
    weights, so each term is the score under that weight alone)."""
    zero = replace(weights, time=0.0, ttft=0.0, throughput=0.0, price=0.0, failure=0.0)
    columns = []
    for name in ("time", "ttft", "throughput", "price", "failure"):
        if not getattr(weights, name) or not means:
            columns.append([0.0] * len(means))
            continue
        column = scores(means, replace(zero, **{name: getattr(weights, name)}))
        low = min(column)
        columns.append([value - low for value in column])
    return [ScoreParts(*values) for values in zip(*columns, strict=True)] if means else []


def _violations(
    model: str,
    option: Option,
    snapshot: StatsSnapshot,
    policy: PolicyConfig,
    preferences: ProviderPreferences,
    kind: RequestKind | None,
    now: float,
) -> tuple[str, ...]:
    """The soft constraints it breaks for a request of this kind, read as a plan reads them (``kind_terms``)."""
    summary = snapshot.get(model, option.deployment.name)
    counts = summary.valid_counts(kind) if summary is not None else (0, 0)
    fails, oks = option.belief.failure(now)
    attempts = summary.attempts if summary is not None else 0
    return broken(
        option.deployment,
        summary,
        policy,
        preferences,
        kind,
        success=(oks / (fails + oks), attempts),
        valid=(valid_rate(*counts), counts[1]),
    )


def _ranked(
    router: BeliefRouter,
    model: str,
    option: Option,
    mean: Cost,
    parts: ScoreParts,
    violations: tuple[str, ...],
    best: float,
    policy: PolicyConfig,
    snapshot: StatsSnapshot,
    now: float,
) -> Ranked:
    deployment, belief = option.deployment, option.belief
    key = (model, deployment.name)
    expected = belief.expected(now, option.prior)
    heard = belief.heard_at
    summary = snapshot.get(model, deployment.name)
    ttft_sd, spt_sd = (math.sqrt(belief.level(now, metric)[1]) for metric in (0, 1))
    prediction = Prediction(
        ttft_s=mean.ttft_s,
        tokens_per_s=1.0 / mean.s_per_token,
        time_s=mean.time_s,
        cost_usd=mean.money_usd,
        success_rate=1.0 - mean.failure,
        attempts=summary.count("ttft_s") if summary is not None else 0,
        prior=not belief.answers,
        uncertainty=Uncertainty(math.hypot(ttft_sd, spt_sd), ttft_sd, spt_sd),
        samples=float(belief.answers),
        age_s=now - heard if heard is not None else None,
        source="recent" if belief.answers else "model",
        seconds_per_token=mean.s_per_token,
        answers=belief.answers,
        failure_s=belief.failures.failure_s or None,
        expected_s=mean.time_s,
    )
    view = BeliefView(
        ttft_s=expected.ttft_s,
        ttft_spread=expected.spread[0],
        tokens_per_s=1.0 / expected.s_per_token,
        tokens_per_s_spread=expected.spread[1],
        age_s=now - heard if heard is not None else None,
        answers=belief.answers,
        changed=belief.changed(now),
        failure=expected.failure,
        best=best,
    )
    state = router.state
    provider = router._providers[deployment.provider]
    capacity = state.capacity.of(provider, key)
    return Ranked(
        model=model,
        scored=Scored(deployment, prediction, parts, violations),
        provider=provider,
        circuit=state.health.state(key, now, router._circuit_changed),
        in_flight=state.deployment_in_flight.get(key, 0),
        provider_in_flight=state.provider_in_flight.get(provider.name, 0),
        judged=belief.answers >= policy.min_samples,
        retry_in_s=state.health.retry_in(key, now),
        rate_limited=state.health.rate_limited(key),
        limit=capacity.allowed,
        blocked_in_s=max(0.0, state.capacity.blocked_until(provider, key) - now),
        remaining_requests=capacity.remaining_requests,
        remaining_tokens=capacity.remaining_tokens,
        reset_in_s=max(0.0, capacity.reset_at - now) if capacity.reset_at is not None else None,
        belief=view,
    )
