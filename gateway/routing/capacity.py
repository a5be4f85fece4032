"""How much each deployment takes: a learned concurrency limit under its provider's ceiling, and its budget.

A configured ``max_concurrency`` is the provider's ceiling for all its models together, never a target. Below it each
deployment (provider × model: one model's refusals never starve another's) learns an AIMD limit in the style of
Netflix's concurrency-limits; a provider that reports its budget out blocks the deployment until the reset, or the
whole provider when its counts show one budget for all its models (``SharedBudget``). The rules are docs/routing.md's
("Load and health"). Not thread-safe: one event loop owns it, inside ``RouterState``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from gateway.conditions import ConditionLog
from gateway.config import ProviderConfig
from gateway.errors import UNAVAILABLE_FOR_NOW
from gateway.types import DeploymentKey

logger = logging.getLogger("gateway")

INITIAL_LIMIT = 32.0
"""Where a provider without a ceiling starts; it grows while the provider keeps answering."""
BACKOFF_FLOOR = 4.0
"""No refusal backs a learned limit off below this (a ceiling below it still caps it): a refusal at one or two in
flight is an outage or a per-request refusal, the circuit's business, not a concurrency the provider takes."""
QUIET_S = 300.0
"""A limit backed off to its floor has recovered once it grows back to twice the floor, or once an answer comes this
long after its last back-off (a quiet provider's limit has no load to grow by)."""


@dataclass(frozen=True, slots=True)
class RateLimits:
    """What a provider's response headers said of its budget; None: that header was absent."""

    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None

    @property
    def exhausted_for_s(self) -> float | None:
        """How long the provider said it is out (0 remaining of requests or tokens), None if it is not."""
        waits = []
        if self.remaining_requests == 0:
            waits.append(self.reset_requests_s if self.reset_requests_s is not None else 1.0)
        if self.remaining_tokens == 0:
            waits.append(self.reset_tokens_s if self.reset_tokens_s is not None else 1.0)
        return max(waits) if waits else None

    @property
    def has_budget(self) -> bool:
        """The provider reported requests (or tokens) left: a refusal then was about load, not budget."""
        return bool(self.remaining_requests) or (self.remaining_requests is None and bool(self.remaining_tokens))


@dataclass(slots=True)
class ProviderLimit:
    """One deployment's learned concurrency limit and last reported budget (or a provider's: ``provider_view``)."""

    limit: float
    ceiling: int | None
    blocked_until: float = 0.0
    """Clock reading before which nothing is sent: the provider said it is out until then."""
    backed_off_at: float = -math.inf
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_at: float | None = None
    refusals: int = 0
    """Overload refusals seen (429s and overload 503s)."""

    @property
    def allowed(self) -> int:
        """Requests that may be in flight now: the learned limit, never above the ceiling."""
        allowed = max(int(self.limit), 1)
        return allowed if self.ceiling is None else min(allowed, self.ceiling)

    def succeeded(self, in_flight: int) -> None:
        """An answer that ended with ``in_flight`` attempts at the provider (itself included)."""
        if in_flight * 2 >= self.limit:
            slow_start = self.backed_off_at == -math.inf
            self.limit += 1.0 if slow_start else 1.0 / max(self.limit, 1.0)
            if self.ceiling is not None:
                self.limit = min(self.limit, float(self.ceiling))

    def overloaded(self, in_flight: int, sent_at: float, now: float) -> bool:
        """The provider refused an attempt sent at ``sent_at``: back off to just under ``in_flight``.

        True when this back-off took the limit down to ``BACKOFF_FLOOR`` (from above it).
        """
        self.refusals += 1
        if sent_at <= self.backed_off_at:
            return False  # sent under the limit before the last back-off: already answered
        self.backed_off_at = now
        before = self.limit
        self.limit = max(BACKOFF_FLOOR, min(self.limit, float(max(in_flight - 1, 1))) * 0.9)
        self.limit = min(self.limit, before)  # a floor, never a raise
        return self.limit <= BACKOFF_FLOOR < before

    def restart(self) -> None:
        """The provider is back after an outage: grow its limit as from a cold start (+1 per answer), as TCP does
        after a timeout. The outage's refusals backed it off, which says nothing of what the provider takes now."""
        self.backed_off_at = -math.inf

    def reported(self, limits: RateLimits, now: float) -> float | None:
        """Note the budget a response reported; the time until reset when it says the provider is out."""
        if limits.remaining_requests is not None:
            self.remaining_requests = limits.remaining_requests
        if limits.remaining_tokens is not None:
            self.remaining_tokens = limits.remaining_tokens
        resets = [s for s in (limits.reset_requests_s, limits.reset_tokens_s) if s is not None]
        if resets:
            self.reset_at = now + max(resets)
        out = limits.exhausted_for_s
        if out is not None:
            self.block(out, now)
        return out

    def block(self, seconds: float, now: float) -> None:
        self.blocked_until = max(self.blocked_until, now + max(seconds, 0.0))


@dataclass(slots=True)
class SharedBudget:
    """Whether one provider's rate-limit counts are one budget for all its models, and that budget's block.

    Shared is learned from the counts themselves: when a deployment's ``remaining-requests`` fell, between
    two of its own reports with nothing else of its own in flight, by more than its own one request and
    by the other models' requests reported meanwhile, the other models' requests were counted against
    it (within twice that, for the requests of theirs still in flight). Independent budgets (OpenAI counts
    per model) never fall by another model's requests.
    """

    shared: bool = False
    blocked_until: float = 0.0
    reports: int = 0
    """Reports of remaining requests seen at this provider, any model: a clock of its own."""
    last: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per model: (its last remaining-requests, ``reports`` when it came)."""

    def heard(self, model: str, remaining: int, alone: bool) -> bool:
        """Note a report; True when it just showed the budget is shared."""
        self.reports += 1
        previous = self.last.get(model)
        self.last[model] = (remaining, self.reports)
        if previous is None or not alone or self.shared or remaining == 0:
            return False  # (an exhausted count says nothing of what was counted)
        before, at = previous
        others = self.reports - at - 1
        if others >= 1 and 1 + others <= before - remaining <= 2 * (1 + others):
            self.shared = True
            return True
        return False


@dataclass
class CapacityBoard:
    """Every deployment's ``ProviderLimit`` (created on first use from its provider's config), and each
    provider's ``SharedBudget``."""

    limits: dict[DeploymentKey, ProviderLimit] = field(default_factory=dict)
    budgets: dict[str, SharedBudget] = field(default_factory=dict)
    providers: dict[DeploymentKey, str] = field(default_factory=dict)
    """Each deployment's provider (as last seen): which limits a provider's metrics sum."""
    floors: ConditionLog[DeploymentKey] = field(default_factory=lambda: ConditionLog(logger))
    """Deployments whose limit was said to be at its floor: a provider that keeps refusing there is said once,
    and once more when it recovers (twice ``BACKOFF_FLOOR`` or ``QUIET_S``), not at each refusal."""

    def of(self, provider: ProviderConfig, key: DeploymentKey) -> ProviderLimit:
        limit = self.limits.get(key)
        ceiling = provider.max_concurrency
        if limit is None:
            self.providers[key] = provider.name
            start = float(ceiling) if ceiling is not None else INITIAL_LIMIT
            limit = self.limits[key] = ProviderLimit(limit=start, ceiling=ceiling)
        elif limit.ceiling != ceiling:
            limit.ceiling = ceiling  # a reload changed it
            if ceiling is not None:
                limit.limit = min(limit.limit, float(ceiling))
        return limit

    def budget(self, provider: str) -> SharedBudget:
        budget = self.budgets.get(provider)
        if budget is None:
            budget = self.budgets[provider] = SharedBudget()
        return budget

    def blocked_until(self, provider: ProviderConfig, key: DeploymentKey) -> float:
        """Before when nothing is sent to ``key``: its own block, or its provider's when the budget is shared."""
        shared = self.budgets.get(provider.name)
        own = self.of(provider, key).blocked_until
        return max(own, shared.blocked_until) if shared is not None and shared.shared else own

    def has_room(
        self, provider: ProviderConfig, key: DeploymentKey, in_flight: int, provider_in_flight: int, now: float
    ) -> bool:
        """Room for one more attempt at ``key``: not blocked, under its limit, and its provider under its ceiling."""
        if now < self.blocked_until(provider, key) or in_flight >= self.of(provider, key).allowed:
            return False
        return provider.max_concurrency is None or provider_in_flight < provider.max_concurrency

    def provider_view(self, provider: ProviderConfig) -> ProviderLimit:
        """One provider's deployments taken together (for its metrics): their limits summed under its ceiling,
        the least budget any reported left, and the latest reset and block."""
        mine = [limit for key, limit in self.limits.items() if self.providers.get(key) == provider.name]
        ceiling = provider.max_concurrency
        total = sum(limit.allowed for limit in mine) if mine else (ceiling if ceiling is not None else INITIAL_LIMIT)
        view = ProviderLimit(limit=float(total), ceiling=ceiling)
        view.remaining_requests = min(
            (m.remaining_requests for m in mine if m.remaining_requests is not None), default=None
        )
        view.remaining_tokens = min((m.remaining_tokens for m in mine if m.remaining_tokens is not None), default=None)
        view.reset_at = max((m.reset_at for m in mine if m.reset_at is not None), default=None)
        shared = self.budgets.get(provider.name)
        view.blocked_until = max([m.blocked_until for m in mine] + [shared.blocked_until if shared else 0.0])
        view.refusals = sum(m.refusals for m in mine)
        return view

    def restart(self, key: DeploymentKey) -> None:
        """``key``'s circuit closed after an outage (``ProviderLimit.restart``)."""
        limit = self.limits.get(key)
        if limit is not None:
            limit.restart()

    def next_change(self, now: float) -> float | None:
        """The soonest time a blocked deployment (or provider) opens again (for waiters to look again then)."""
        times = [limit.blocked_until for limit in self.limits.values() if limit.blocked_until > now]
        times += [b.blocked_until for b in self.budgets.values() if b.shared and b.blocked_until > now]
        return min(times) if times else None

    def observe(
        self,
        provider: ProviderConfig,
        key: DeploymentKey,
        *,
        ok: bool,
        status: int | None,
        in_flight: int,
        limits: RateLimits | None,
        retry_after_s: float | None,
        sent_at: float | None,
        now: float,
        in_flight_at_send: int | None = None,
    ) -> bool:
        """Learn from one finished attempt at ``key`` (``in_flight``: the deployment's, itself included, now;
        ``in_flight_at_send``: when the attempt was sent, the concurrency a refusal was made at); True when the
        deployment said it is out (its budget, not its load)."""
        limit = self.of(provider, key)
        budget = self.budget(provider.name)
        out_for = limit.reported(limits, now) if limits is not None else None
        if limits is not None and limits.remaining_requests is not None:
            if budget.heard(key[0], limits.remaining_requests, alone=in_flight <= 1):
                logger.info("provider %s: its rate-limit counts are one budget for all its models", provider.name)
        sent = sent_at if sent_at is not None else now
        if status == 429 or status in UNAVAILABLE_FOR_NOW:
            refused_at = in_flight if in_flight_at_send is None else in_flight_at_send
            if limit.overloaded(refused_at, sent, now):
                self.floors.holds(
                    key,
                    "floor",
                    "deployment %s of model %s: concurrency limit backed off to its floor (%d) after a %d",
                    key[1],
                    key[0],
                    limit.allowed,
                    status,
                )
            if retry_after_s is not None:
                limit.block(retry_after_s, now)
                out_for = max(out_for or 0.0, retry_after_s)
        elif ok:
            limit.succeeded(in_flight)
            if self.floors.active(key) and (limit.limit >= 2 * BACKOFF_FLOOR or now - limit.backed_off_at >= QUIET_S):
                self.floors.ended(
                    key,
                    "deployment %s of model %s: concurrency limit recovered (now %d)",
                    key[1],
                    key[0],
                    limit.allowed,
                )
        if out_for is not None and budget.shared:
            budget.blocked_until = max(budget.blocked_until, now + out_for)
        return out_for is not None
