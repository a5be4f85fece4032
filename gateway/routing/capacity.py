"""How much each provider takes: a learned concurrency limit under its ceiling, and its rate-limit budget.

A configured ``max_concurrency`` is a ceiling, never a target (absent: no ceiling). Below it each
provider has an adaptive limit, AIMD in the style of Netflix's concurrency-limits::

    ok answer, while at least half the limit was in use       limit += 1 / limit  (about +1 per round;
                                                               +1 per answer until the first back-off)
    429 or overload 503/529                                   limit = in flight at the refusal × 0.9
                                                               (once per round: see below)
    a circuit closes after an outage                          slow start again (``ProviderLimit.restart``)

Growth only counts answers that used the limit, so an idle provider's limit does not creep up to
the ceiling unearned; until the provider first pushes back it grows as fast as TCP's slow start.
A refusal sets it just below the concurrency the provider refused at, which is what makes a
provider that refuses above N settle near N instead of collapsing. As TCP backs off
once per window of data in flight, a refusal of an attempt sent before the last back-off is not
counted again: it was sent under the old limit, and the back-off already answered it.

First-token times are not a signal here, on purpose: a busy gateway or client slows them as much
as a queueing provider does. Backing off on a first token over twice the quiet one collapsed two
healthy providers' limits to 3 and 12 in a burst on a CPU-starved machine, and only holding the
limit on it kept a provider from ever reaching the concurrency it refuses at; a provider that
queues rather than refuses needs its ``max_concurrency``.

Providers also say what they have left: ``x-ratelimit-remaining-requests`` / ``-tokens`` with
``x-ratelimit-reset-requests`` / ``-tokens``. A provider that reports 0 remaining (or a 429 with a
``Retry-After``) is out: nothing is sent to it until its reset. Not thread-safe: one event loop
owns it, inside ``RouterState``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.config import ProviderConfig

INITIAL_LIMIT = 32.0
"""Where a provider without a ceiling starts; it grows while the provider keeps answering."""
MIN_LIMIT = 1.0
BACKOFF_RATIO = 0.9
OVERLOAD_STATUSES = frozenset({429, 503, 529})


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
    """One provider's learned concurrency limit and last reported budget."""

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
        allowed = max(int(self.limit), int(MIN_LIMIT))
        return allowed if self.ceiling is None else min(allowed, self.ceiling)

    def has_room(self, in_flight: int, now: float) -> bool:
        return now >= self.blocked_until and in_flight < self.allowed

    def succeeded(self, in_flight: int) -> None:
        """An answer that ended with ``in_flight`` attempts at the provider (itself included)."""
        if in_flight * 2 >= self.limit:
            slow_start = self.backed_off_at == -math.inf
            self.limit += 1.0 if slow_start else 1.0 / max(self.limit, 1.0)
            if self.ceiling is not None:
                self.limit = min(self.limit, float(self.ceiling))

    def overloaded(self, in_flight: int, sent_at: float, now: float) -> None:
        """The provider refused an attempt sent at ``sent_at``: back off to just under ``in_flight``."""
        self.refusals += 1
        if sent_at <= self.backed_off_at:
            return  # sent under the limit before the last back-off: already answered
        self.backed_off_at = now
        self.limit = max(MIN_LIMIT, min(self.limit, float(max(in_flight - 1, 1))) * BACKOFF_RATIO)

    def restart(self) -> None:
        """The provider is back after an outage: grow its limit as from a cold start (+1 per answer).

        An outage's refusals come at whatever was in flight when it began, then one half-open probe
        at a time: they back the limit off to 1, which says nothing of what the provider takes once
        it answers again. Growing by ``1 / limit`` from there, it took ten answers to carry four
        requests at once, and every request over the limit went to a slower provider meanwhile (as
        TCP slow-starts again after a timeout). A provider that really refuses above N backs off
        to just under N again at its next refusal.
        """
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


@dataclass
class CapacityBoard:
    """Every provider's ``ProviderLimit``, created on first use from its config."""

    limits: dict[str, ProviderLimit] = field(default_factory=dict)

    def of(self, provider: ProviderConfig) -> ProviderLimit:
        limit = self.limits.get(provider.name)
        ceiling = provider.max_concurrency
        if limit is None:
            start = float(ceiling) if ceiling is not None else INITIAL_LIMIT
            limit = self.limits[provider.name] = ProviderLimit(limit=start, ceiling=ceiling)
        elif limit.ceiling != ceiling:
            limit.ceiling = ceiling  # a reload changed it
            if ceiling is not None:
                limit.limit = min(limit.limit, float(ceiling))
        return limit

    def restart(self, provider: str) -> None:
        """``provider``'s circuit closed after an outage (``ProviderLimit.restart``)."""
        limit = self.limits.get(provider)
        if limit is not None:
            limit.restart()

    def next_change(self, now: float) -> float | None:
        """The soonest time a blocked provider opens again (for waiters to look again then)."""
        times = [limit.blocked_until for limit in self.limits.values() if limit.blocked_until > now]
        return min(times) if times else None

    def observe(
        self,
        provider: ProviderConfig,
        *,
        ok: bool,
        status: int | None,
        in_flight: int,
        limits: RateLimits | None,
        retry_after_s: float | None,
        sent_at: float | None,
        now: float,
    ) -> bool:
        """Learn from one finished attempt; True when the provider said it is out (its budget, not its load)."""
        limit = self.of(provider)
        out = limit.reported(limits, now) is not None if limits is not None else False
        sent = sent_at if sent_at is not None else now
        if status in OVERLOAD_STATUSES:
            limit.overloaded(in_flight, sent, now)
            if retry_after_s is not None:
                limit.block(retry_after_s, now)
                out = True
        elif ok:
            limit.succeeded(in_flight)
        return out
