"""The seam between routing and the attempt loop: ``Router.plan`` → ``RoutePlan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config import DeploymentConfig, GatewayConfig, ModelConfig, PolicyConfig, ProviderConfig
from gateway.samples import Endpoint, Sample

RouteReason = Literal["best-score", "explore", "fallback", "hedge", "override"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One deployment the request may be sent to, and why it is in the plan where it is."""

    deployment: DeploymentConfig
    provider: ProviderConfig
    reason: RouteReason = "best-score"

    @property
    def name(self) -> str:
        return self.deployment.name


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What the router may know of a request: no HTTP, no body beyond what scores need."""

    model: ModelConfig
    endpoint: Endpoint
    stream: bool
    prompt_tokens: int
    """An estimate of the prompt's size in tokens."""
    max_tokens: int | None
    """The request's own output ceiling, if it set one."""


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Candidates in the order to try them; the policy bounds attempts and timeouts."""

    candidates: tuple[Candidate, ...]
    policy: PolicyConfig


class Router(Protocol):
    """Orders candidates for a request, and hears how each attempt went.

    ``attempt_started``/``attempt_finished`` bracket every attempt (for in-flight counts and
    health); ``plan`` must not do I/O: it runs while the request waits.
    """

    def plan(self, request: RouteRequest) -> RoutePlan: ...

    def attempt_started(self, candidate: Candidate) -> None: ...

    def attempt_finished(self, candidate: Candidate, sample: Sample) -> None: ...


class OrderedRouter:
    """The simplest router: a model's deployments in config order, first to last."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config

    def plan(self, request: RouteRequest) -> RoutePlan:
        providers = {p.name: p for p in self.config.providers}
        candidates = tuple(
            Candidate(deployment=d, provider=providers[d.provider], reason="best-score" if i == 0 else "fallback")
            for i, d in enumerate(request.model.deployments)
        )
        return RoutePlan(candidates=candidates, policy=self.config.policy_for(request.model))

    def attempt_started(self, candidate: Candidate) -> None:
        pass

    def attempt_finished(self, candidate: Candidate, sample: Sample) -> None:
        pass
