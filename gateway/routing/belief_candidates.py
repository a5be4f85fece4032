"""The belief router's candidates: a drawn order of deployments made into the plan's ``Candidate`` list.

``BeliefRouter.plan`` draws the order (``gateway.routing.choose``); ``candidates_of`` dresses each
deployment in it for the relay: why it is tried (best, fallback, explore, override), what it is
predicted to take, its learned first-token and idle deadlines, and when a hedge should follow it.
"""

from __future__ import annotations

from gateway.config import PolicyConfig, ProviderConfig
from gateway.routing.choose import Choice, Option
from gateway.routing.health import RouterState
from gateway.routing.hedge import hedge_after
from gateway.routing.plan import Candidate, RouteRequest
from gateway.stats import StatsSnapshot
from gateway.types import RouteReason


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
) -> list[Candidate]:
    """The plan's candidates in ``order``: each with its reason, its predicted times, its learned deadlines, and
    when to hedge it (a race's members at once, a streamed request's others at the tail ``hedge_after`` reads)."""
    model = request.model.name
    hedging = request.stream and policy.hedging
    candidates = []
    for position, i in enumerate(order):
        deployment = options[i].deployment
        predicted = choice.costs[i]
        after: float | None = None
        if position < len(race):
            after = 0.0 if position + 1 < len(race) else None
        elif hedging and position + 1 < len(order):
            backup = choice.costs[order[position + 1]]
            extra = max(0.0, backup.time_s - backup.ttft_s - (predicted.time_s - predicted.ttft_s))
            after = hedge_after(policy, snapshot, model, deployment.name, backup.ttft_s + extra, state.tails, now)
        reason: RouteReason = "best-score" if position == 0 else "fallback"
        if request.preferences.steers and position == 0:
            reason = "override"
        if (choice.explored and position < max(1, len(race) - 1)) or (choice.cold and position < len(race)):
            reason = "explore"  # measured to the end if it loses: drained
        deadlines = state.deadlines.of((model, deployment.name), policy, snapshot.get(model, deployment.name), now)
        candidates.append(
            Candidate(
                deployment,
                providers[deployment.provider],
                reason=reason,
                model=model,
                hedge_after_s=after,
                predicted_s=predicted.time_s,
                predicted_first_token_s=predicted.ttft_s if request.stream else None,
                first_token_timeout_s=deadlines.first_token_s if deadlines is not None else None,
                idle_timeout_s=deadlines.idle_s if deadlines is not None else None,
            )
        )
    return candidates
