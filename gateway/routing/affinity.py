"""Session affinity: a conversation's next turn goes where its prompt is cached, when that wins.

The deployment a session is bound to holds its previous prompt, every other none (``cached_on``); a turn that may
stay (``staying``) is ordered by the beliefs' means, and ``decided`` says whether it stayed or moved, and why
(docs/routing.md, "Sessions and prompt caches").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gateway.config import DeploymentConfig
from gateway.routing.overrides import ProviderPreferences
from gateway.routing.plan import AffinityDecision, SessionRoute
from gateway.routing.ranking import Ranked
from gateway.stats import StatsSnapshot

BoundState = Literal["available", "unavailable", "excluded"]
"""Where the session's deployment stands for this turn: it may serve, it cannot (circuit open, provider full), or it
may not (a filter, an API it does not speak)."""


def _ignored(session: SessionRoute, preferences: ProviderPreferences) -> bool:
    return session.affinity == "off" or bool(preferences.order) or preferences.only is not None


def cached_on(
    model: str,
    session: SessionRoute | None,
    deployments: Sequence[DeploymentConfig],
    preferences: ProviderPreferences,
    prompt_tokens: int,
    snapshot: StatsSnapshot,
) -> dict[str, int]:
    """The prompt tokens the request is expected to find cached on each deployment: a session's previous prompt on
    the deployment it is bound to and none elsewhere; without a session to go by, each one's observed hit ratio."""
    if session is not None and not _ignored(session, preferences) and session.lookup != "unavailable":
        # A fingerprint seen for the first time may be a one-off request: priced as one without a session.
        if session.lookup == "bound" or session.source != "fingerprint":
            cached = dict.fromkeys((d.name for d in deployments), 0)
            if session.lookup == "bound" and session.deployment in cached:
                cached[session.deployment] = min(prompt_tokens, session.prompt_tokens)
            return cached
    cached = {}
    for d in deployments:
        summary = snapshot.summaries.get((model, d.name))  # ``snapshot.get``, without its Python frame
        hit_ratio = summary.hit_ratio() if summary is not None else None
        cached[d.name] = round(prompt_tokens * hit_ratio) if hit_ratio else 0
    return cached


def staying(
    session: SessionRoute | None, deployments: Sequence[DeploymentConfig], preferences: ProviderPreferences
) -> str | None:
    """The deployment whose cache holds the session's prompt, when this turn may stay there (None: it may not)."""
    if session is None or session.lookup != "bound" or _ignored(session, preferences):
        return None
    return session.deployment if any(d.name == session.deployment for d in deployments) else None


def stay_first(
    order: list[int], deployments: Sequence[DeploymentConfig], session: SessionRoute | None, stay: str | None
) -> list[int]:
    """``order`` (indices into ``deployments``) with a ``strict`` session's deployment first when the turn may stay
    there (``staying``): it stays unless it cannot serve. The plan and the explanation both order by it."""
    if stay is not None and session is not None and session.affinity == "strict":
        order.sort(key=lambda i: deployments[i].name != stay)
    return order


def decide(
    session: SessionRoute, rows: Sequence[Ranked], first: Ranked, preferences: ProviderPreferences
) -> AffinityDecision:
    """``decided``, the session's deployment's state read from the ranking's ``rows``."""
    bound = next((r for r in rows if r.deployment.name == session.deployment), None)
    state: BoundState = "excluded" if bound is None else "available" if bound.available else "unavailable"
    return decided(session, first.deployment.name, state, preferences)


def decided(session: SessionRoute, first: str, bound: BoundState, preferences: ProviderPreferences) -> AffinityDecision:
    """What routing to ``first`` means for the session, its deployment being ``bound`` for this turn: stayed, moved
    (``slower``: it could serve but another came first; or it could not, or may not), or no binding to keep."""
    if _ignored(session, preferences):
        return AffinityDecision("off", session.deployment)
    if session.lookup == "unavailable":
        return AffinityDecision("unknown")
    if session.lookup == "unbound" or session.deployment is None:
        return AffinityDecision("new")
    if first == session.deployment:
        return AffinityDecision("stay", session.deployment)
    return AffinityDecision("move", session.deployment, "slower" if bound == "available" else bound)
