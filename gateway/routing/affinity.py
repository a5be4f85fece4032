"""Session affinity: a conversation's next turn goes where its prompt is cached, when that wins.

Every serious gateway pins a session to the deployment it first used. Pinning blindly keeps a
session on a provider that has since slowed down fivefold, and moving blindly (scoring each turn
on its own) scatters a conversation's turns over providers that each prefill its whole growing
prompt again. The router weighs both sides instead:

- the deployment the session is bound to (its previous answer's) is priced ``warm``: the previous
  prompt's tokens cached there, at its ``price_cached_in`` and without their prefill;
- every other deployment ``cold``: the whole prompt's prefill and the full price;

(``cached_on``: prompt tokens cached per deployment, entering the router's ``cost``). A turn that may
stay (``staying``) is ordered by the beliefs' means, with no draw and no look; the session stays when
its deployment comes first, and moves when it does not (``slower``: it degraded, failed, or another
became much better), when it cannot serve (``unavailable``: circuit open, provider full) or when it may
not (``excluded``: a filter, an API it does not speak); ``decided`` reads the outcome.
``affinity = "strict"`` stays unless it cannot serve; ``"off"`` (or the request's
``x-gateway-affinity: off`` header, or its ``provider.order`` / ``only``, which take precedence)
routes the turn as a request without a session: priced by each deployment's observed hit ratio.

A named session (a header, ``prompt_cache_key``) bound nowhere yet (its first turn, or an expired
binding) is priced ``cold`` everywhere: no deployment holds its prompt, so each would prefill all
of it at the full price. Its first turn matters most (the session stays wherever it lands, as long
as staying wins), and the observed hit ratio that prices a request without a session is other
conversations' luck: it would predict a 60k-token first turn at the first token a warm turn gets
there. A long prompt fingerprinted for the first time may as well be a one-off request as a
conversation's first turn: it is routed as a request without a session (priced by each deployment's
hit ratio), so that traffic without sessions is routed exactly as with affinity off; so is a session
whose binding could not be read in time (Redis slow or down), which may be bound somewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gateway.config import DeploymentConfig
from gateway.routing.cost import EFFECTIVE, CacheTerms, cached_tokens
from gateway.routing.overrides import ProviderPreferences
from gateway.routing.plan import AffinityDecision, SessionRoute
from gateway.routing.ranking import Ranked
from gateway.stats import StatsSnapshot

COLD = CacheTerms("cold")
BoundState = Literal["available", "unavailable", "excluded"]
"""Where the session's deployment stands for this turn: it may serve, it cannot (circuit open, provider full), or it
may not (a filter, an API it does not speak)."""


def _ignored(session: SessionRoute, preferences: ProviderPreferences) -> bool:
    return session.affinity == "off" or bool(preferences.order) or preferences.only is not None


def cache_terms(
    session: SessionRoute | None, deployments: Sequence[DeploymentConfig], preferences: ProviderPreferences
) -> dict[str, CacheTerms] | None:
    """What the request's prompt may find cached on each deployment (None: no session, a fingerprint bound
    nowhere, or a binding that could not be read: priced by hit ratio; a named session bound nowhere: cold
    everywhere)."""
    if session is None or _ignored(session, preferences) or session.lookup == "unavailable":
        return None
    if session.lookup == "unbound" and session.source == "fingerprint":
        return None
    terms = {d.name: COLD for d in deployments}
    if session.lookup != "bound":
        return terms
    if session.deployment in terms:
        terms[session.deployment] = CacheTerms("warm", session.prompt_tokens)
    return terms


def cached_on(
    model: str,
    session: SessionRoute | None,
    deployments: Sequence[DeploymentConfig],
    preferences: ProviderPreferences,
    prompt_tokens: int,
    snapshot: StatsSnapshot,
) -> dict[str, int]:
    """The prompt tokens the request is expected to find cached on each deployment (``cache_terms``; without a
    session's terms, each deployment's observed hit ratio in the shared window)."""
    terms = cache_terms(session, deployments, preferences)
    cached = {}
    for d in deployments:
        summary = snapshot.summaries.get((model, d.name))  # ``snapshot.get``, without its Python frame
        hit_ratio = summary.hit_ratio() if summary is not None else None
        cached[d.name] = cached_tokens(terms.get(d.name, EFFECTIVE) if terms else EFFECTIVE, prompt_tokens, hit_ratio)
    return cached


def staying(
    session: SessionRoute | None, deployments: Sequence[DeploymentConfig], preferences: ProviderPreferences
) -> str | None:
    """The deployment whose cache holds the session's prompt, when this turn may stay there (None: no binding to
    keep, or its deployment may not serve this request): a turn there is not explored away from its cache."""
    if session is None or session.lookup != "bound" or _ignored(session, preferences):
        return None
    return session.deployment if any(d.name == session.deployment for d in deployments) else None


def decide(
    session: SessionRoute, rows: Sequence[Ranked], first: Ranked, preferences: ProviderPreferences
) -> AffinityDecision:
    """What routing ``first`` means for the session: stayed, moved (and why), or no binding to keep."""
    bound = next((r for r in rows if r.deployment.name == session.deployment), None)
    state: BoundState = "excluded" if bound is None else "available" if bound.available else "unavailable"
    return decided(session, first.deployment.name, state, preferences)


def decided(session: SessionRoute, first: str, bound: BoundState, preferences: ProviderPreferences) -> AffinityDecision:
    """What routing to ``first`` means for the session, its deployment being ``bound`` for this turn: stayed, moved
    (slower: it could serve but another came first; or it could not, or may not), or no binding to keep."""
    if _ignored(session, preferences):
        return AffinityDecision("off", session.deployment)
    if session.lookup == "unavailable":
        return AffinityDecision("unknown")
    if session.lookup == "unbound" or session.deployment is None:
        return AffinityDecision("new")
    if first == session.deployment:
        return AffinityDecision("stay", session.deployment)
    return AffinityDecision("move", session.deployment, "slower" if bound == "available" else bound)
