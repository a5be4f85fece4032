"""The belief router as the live gateway serves it: what the app reads of a router beyond ``Router``.

Explaining (``rank``), capacity for metrics, the demand behind each model, and handing beliefs to the router a
reload builds live here, so that ``belief_router`` holds only decisions.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gateway.config import ModelConfig, ProviderConfig
from gateway.errors import NoCapacity
from gateway.routing.affinity import BoundState, decided
from gateway.routing.belief_rank import rank_beliefs
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.capacity import ProviderLimit
from gateway.routing.lengths import Forecast, LengthSource, request_shape
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences
from gateway.routing.plan import AffinityDecision, Candidate, RoutePlan, RouteRequest, SessionRoute
from gateway.routing.ranking import Ranking, no_capacity
from gateway.samples import Endpoint, RequestKind
from gateway.types import InputKind

logger = logging.getLogger("gateway")


class LiveBeliefRouter(BeliefRouter):
    """``BeliefRouter`` with what the live gateway reads of its router (``gateway.routing.serving.ServingRouter``).

    Usage::

        router = LiveBeliefRouter(config, stats_store, state=previous.state)
        router.inherit(previous)          # on a reload: the same beliefs, lengths and budgets
        router.rank(model)                # the ranking, explained
    """

    def plan(self, request: RouteRequest) -> RoutePlan:
        self.state.asked[request.model.name] += 1
        try:
            plan = super().plan(request)
        except NoCapacity:
            # Every circuit is open: say why per deployment (429 with the wait when all were rate limited).
            raise no_capacity(request.model.name, self._ranking(request).rows) from None
        affinity = self._affinity(request, plan) if request.session is not None else None
        if affinity is not None:
            first = plan.candidates[0]
            self.events.session_routed(first.model, first.name, affinity.choice, affinity.reason)
            plan = replace(plan, affinity=affinity)
        return replace(plan, ranking=self._ranking(request)) if request.explain else plan

    def forecast(self, request: RouteRequest) -> Forecast:
        """The answer length the belief router plans for this request (``lengths.request_shape``)."""
        default = request.max_tokens or self.config.policy_for(request.model).default_output_tokens
        source: LengthSource = "request" if request.max_tokens else "default"
        return self.lengths.forecast(request_shape(request), request.max_tokens, default, source)

    def _affinity(self, request: RouteRequest, plan: RoutePlan) -> AffinityDecision:
        """What the plan did with the request's session: its deployment may serve this turn, cannot (its circuit is
        open) or may not (filtered out)."""
        session = request.session
        assert session is not None
        bound: BoundState = "available"
        if not any(c.name == session.deployment for c in plan.candidates):
            key = (request.model.name, session.deployment or "")
            known = any(d.name == key[1] for d in request.model.deployments)
            open_now = known and self.state.health.state(key, self.clock(), self._circuit_changed) == "open"
            bound = "unavailable" if open_now else "excluded"
        return decided(session, plan.candidates[0].name, bound, request.preferences)

    def _ranking(self, request: RouteRequest) -> Ranking:
        return self.rank(
            request.model,
            endpoint=request.endpoint,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            preferences=request.preferences,
            pinned=request.pinned,
            kind=request.kind,
            session=request.session,
        )

    def rank(
        self,
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
        """``model``'s deployments for a request of this shape, each with its belief (``rank_beliefs``)."""
        return rank_beliefs(
            self,
            model,
            endpoint=endpoint,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            preferences=preferences,
            pinned=pinned,
            kind=kind,
            session=session,
        )

    def capacity_of(self, provider: ProviderConfig) -> ProviderLimit:
        """The provider's deployments' learned limits and reported budgets, taken together (for metrics)."""
        return self.state.capacity.provider_view(provider)

    def inherit(self, previous: BeliefRouter) -> None:
        """Carry on from the router before a reload: the same state objects, shared rather than copied, because the
        old router's attempts still running report to them."""
        self.beliefs = previous.beliefs
        self.hazards = previous.hazards  # the ones its beliefs share: a new deployment's joins them
        self.priors = previous.priors
        self.others = previous.others
        self.lengths = previous.lengths
        self.budget = previous.budget
        self.counts = previous.counts
        self._attempts = previous._attempts
        self._open = previous._open
        self.running = previous.running
        self._lengths_of = previous._lengths_of
        self._bytes_per_token = previous._bytes_per_token

    def continuation_refused(self, candidate: Candidate) -> None:
        until = self.state.refused_continuation.get((candidate.model, candidate.name), float("-inf"))
        if until <= self.clock():
            logger.warning(
                "deployment %s of model %s is marked continue_prefill but refused a continuation: "
                "not continuable for a while (check its continue_prefill and prefill_format)",
                candidate.name,
                candidate.model,
            )
        super().continuation_refused(candidate)

    def input_refused(self, candidate: Candidate, kind: InputKind, words: str) -> None:
        if self.state.inputs.learn((candidate.model, candidate.name), kind, words, self.clock()):
            logger.info(
                "deployment %s of model %s does not accept %s input (learned from its refusal): such requests "
                "go to the model's other deployments",
                candidate.name,
                candidate.model,
                kind,
            )

    def context_exceeded(self, candidate: Candidate, limit: int | None) -> None:
        known = self.state.windows.window(candidate.model, candidate.deployment)
        super().context_exceeded(candidate, limit)
        if limit is not None and self.state.windows.window(candidate.model, candidate.deployment) != known:
            logger.info(
                "deployment %s of model %s accepts at most %d tokens (learned from its context_length_exceeded)",
                candidate.name,
                candidate.model,
                limit,
            )
