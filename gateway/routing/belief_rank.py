"""The belief router's ranking, explained: what each deployment is believed to be now, and how likely it is best.

``rank_beliefs`` builds the ``Ranking`` that ``GET /v1/gateway/routes``, the trace, the dashboard and
``gateway check`` show. It orders the deployments as a plan's fallbacks follow them (a request's first pick is a
draw) and gives each its ``BeliefView``; it reads the router's beliefs and decides no route. The prompt tokens
expected in each deployment's cache are the plan's (``affinity.cached_on``): a session's turn is ranked with its
cached prompt where it is bound, so the explanation shows the order that turn takes.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from gateway.config import ModelConfig, PolicyConfig
from gateway.errors import InvalidRequest
from gateway.routing.affinity import cached_on, stay_first, staying
from gateway.routing.apis import speaking
from gateway.routing.belief_candidates import kind_terms
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.choose import Counts, Option, chance_best, mean_costs
from gateway.routing.cost import Cost, Shape, Weights, scores
from gateway.routing.filters import allowed, as_preferred
from gateway.routing.lengths import LengthSource, shape_of
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.plan import SessionRoute
from gateway.routing.ranking import (
    BeliefView,
    Prediction,
    Ranked,
    Ranking,
    RequestShape,
    Scored,
    ScoreParts,
    Uncertainty,
)
from gateway.samples import Endpoint, RequestKind
from gateway.stats import StatsSnapshot


def rank_beliefs(
    router: BeliefRouter,
    model: ModelConfig,
    *,
    endpoint: Endpoint | None = None,
    prompt_tokens: int = 500,
    max_tokens: int | None = None,
    preferences: ProviderPreferences = NO_PREFERENCES,
    pinned: str | None = None,
    kind: RequestKind | None = None,
    session: SessionRoute | None = None,
) -> Ranking:
    """``model``'s deployments for a request of this shape, leader first, each with its belief (no side effects).
    ``session``: the request continues it, as the plan's ``RouteRequest.session`` (None: it continues none)."""
    policy = router.config.policy_for(model)
    now = router.clock()
    snapshot = router.stats.snapshot()
    deployments = allowed(speaking(model, endpoint, pinned), preferences, router._providers)
    length = shape_of(model.name, max_tokens, api=endpoint or "chat", kind=kind)
    default = policy.default_output_tokens
    # What the length rests on when no answer was seen: the policy's default, or max_tokens where that caps it.
    given: LengthSource = "request" if max_tokens and max_tokens < default else "default"
    forecast = router.lengths.forecast(length, max_tokens, float(default), given)
    options = [router._option(model.name, d.name, d, snapshot, now) for d in deployments]
    valid, broken = kind_terms(options, snapshot, model.name, policy, preferences, kind, now)
    cached = cached_on(model.name, session, deployments, preferences, prompt_tokens, snapshot)
    shape = Shape(prompt_tokens, forecast.mean, cached, valid)
    weights = Weights.of(policy, preferences.sort)
    means = mean_costs(options, shape, weights, now)
    totals = scores(means, weights) if means else []
    parts = _parts(means, weights)
    # One that breaks a constraint is never drawn (unless every one does): its chance of being the best is 0. The
    # order: the config's under a fixed policy; else the constraints kept, the measured first, by expected score.
    every_breaks = all(broken)
    kept = [i for i in range(len(options)) if every_breaks or not broken[i]]
    drawn = chance_best([options[i] for i in kept], shape, weights, now, random.Random(0)) if kept else []
    best = [0.0] * len(options)
    for i, chance in zip(kept, drawn, strict=True):
        best[i] = chance
    if policy.ranking == "fixed":
        order = list(range(len(options)))
    else:
        order = sorted(
            range(len(options)),
            key=lambda i: (bool(broken[i]) and not every_breaks, not options[i].belief.answers, totals[i]),
        )
    stay = staying(session, deployments, preferences)
    order = as_preferred(stay_first(order, deployments, session, stay), deployments, preferences)
    if not order and not preferences.allow_fallbacks:
        raise InvalidRequest(
            f"'provider.order' names no deployment of model '{model.name}' and allow_fallbacks is false",
            param="provider.order",
        )
    rows = [
        _ranked(router, model.name, options[i], means[i], parts[i], broken[i], best[i], policy, snapshot, now)
        for i in order
    ]
    rows.sort(key=lambda r: not r.available)  # stable: unavailable ones last, order kept
    counts = router.counts.get(model.name, Counts())
    return Ranking(
        model,
        policy,
        RequestShape(endpoint or "chat", prompt_tokens, round(forecast.mean), forecast.source, kind),
        tuple(rows),
        requests=counts.requests,
        probes=counts.explored,
        races=counts.races,
        cold_starts=counts.cold_starts,
        shadows=counts.shadows,
        extra_attempts=counts.shares()[1] if counts.requests else 0.0,
    )


def _parts(means: list[Cost], weights: Weights) -> list[ScoreParts]:
    """Each deployment's score split into its terms, each 0 for the best on it (the score is linear in the weights:
    each term is the score under that weight alone)."""
    if not means:
        return []
    zero = replace(weights, time=0.0, ttft=0.0, throughput=0.0, price=0.0, failure=0.0)
    columns = []
    for name in ("time", "ttft", "throughput", "price", "failure"):
        if not getattr(weights, name):
            columns.append([0.0] * len(means))
            continue
        column = scores(means, replace(zero, **{name: getattr(weights, name)}))
        low = min(column)
        columns.append([value - low for value in column])
    return [ScoreParts(*values) for values in zip(*columns, strict=True)]


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
    age_s = now - belief.heard_at if belief.heard_at is not None else None
    summary = snapshot.get(model, deployment.name)
    ttft_sd, spt_sd = [math.sqrt(belief.level(now, metric)[1]) for metric in (0, 1)]
    prediction = Prediction(
        ttft_s=mean.ttft_s,
        tokens_per_s=1.0 / mean.s_per_token,
        time_s=mean.time_s,
        cost_usd=mean.money_usd,
        success_rate=1.0 - mean.failure,
        attempts=summary.attempts if summary is not None else 0,
        prior=not belief.answers,
        uncertainty=Uncertainty(math.hypot(ttft_sd, spt_sd), ttft_sd, spt_sd),
        samples=float(belief.answers),
        age_s=age_s,
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
        age_s=age_s,
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
        opened_after=state.health.reason(key),
        limit=capacity.allowed,
        blocked_in_s=max(0.0, state.capacity.blocked_until(provider, key) - now),
        remaining_requests=capacity.remaining_requests,
        remaining_tokens=capacity.remaining_tokens,
        reset_in_s=max(0.0, capacity.reset_at - now) if capacity.reset_at is not None else None,
        belief=view,
    )
