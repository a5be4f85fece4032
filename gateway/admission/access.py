"""Admission: the one place a request is authenticated, authorised and counted against its limits.

The inference endpoints call, cheapest refusal first::

    key = access.authenticate(scope)          # 401 (before the body is read)
    ...read and parse the body, find the model...
    ticket = await access.admit(key, model, body, endpoint, prompt_tokens, max_tokens)
                                              # 403 model, 400 shape, 503/429 in flight, 429 rate
    try:
        plan = router.plan(...)
        await access.reserve_spend(ticket, plan deployments, ...)   # 402 budget, 503 budget store down
        ...serve...
    finally: ticket.release()

``admit`` reserves ``prompt estimate + max_tokens × n`` tokens against the key's per-minute
budget, or, when that does not fit, ``prompt estimate + likely tokens × n`` (``likely_output_tokens``,
as for the dollar budget). The attempts' samples (``gateway.admission.usage.USAGE_TAP``, a sample sink) add up what was
actually produced for this request, and ``release`` books the difference; it also settles the request's dollar
hold (``gateway.admission.spending``) with the cost of every attempt. The tally reaches the sink through a
context variable set in the request's task: samples are recorded in that task or in tasks it
spawns, which inherit it, so no layer in between has to pass it along.

Admin endpoints call ``gateway.runtime.require_admin(request)``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.admission.auth import AdminKey, ClientKey, KeyLimits, KeyRing, is_loopback, presented_key
from gateway.admission.limits import InFlight, check_shape
from gateway.admission.ratelimit import InMemoryRateLimiter, RateLimiter, retry_after_header
from gateway.admission.spending import InMemorySpendStore, Spender, SpendLedger, worst_case_usd
from gateway.admission.spending.ledger import HOLD_MARGIN_S, likely_output_tokens
from gateway.admission.spending.metrics import SpendMetrics
from gateway.admission.spending.store import Hold, SpendStoreDown
from gateway.admission.spending.windows import Budget
from gateway.admission.usage import TALLY, UsageTally
from gateway.config import AuthConfig, DeploymentConfig, LimitsConfig
from gateway.eager import start_eagerly
from gateway.errors import AuthenticationFailed, NoCapacity, PermissionDenied, RateLimited
from gateway.frozen import positional_maker
from gateway.routing.lengths import Forecast
from gateway.samples import Endpoint, Sample

logger = logging.getLogger("gateway.access")


class AccessState:
    """What admission keeps for the life of the process (a reloaded config keeps counting).

    Owns the rate limiter and the spend ledger's store; ``aclose`` waits for pending token
    corrections and settlements, then closes them.
    """

    def __init__(self, limiter: RateLimiter, spend: SpendLedger | None = None) -> None:
        self.limiter = limiter
        self.spend = spend if spend is not None else SpendLedger(InMemorySpendStore())
        self.in_flight = InFlight()
        self._pending: set[asyncio.Task[None]] = set()
        self.local_limits = isinstance(limiter, InMemoryRateLimiter)
        """The limiter is this process's own (its bookings never wait)."""

    def spawn(self, work: Coroutine[Any, Any, None], *, local: bool = False) -> None:
        """Book ``work`` in the background. ``local``: it is an in-memory store's, which never waits: run at once
        (``gateway.eager``), no task. A Redis store's is not: its first steps would run in the caller's task, and
        a timeout entered there (redis-py's) would be bound to that task, not to the one that finishes it."""
        task: asyncio.Task[None] | None
        if local:
            try:
                task = start_eagerly(work)
            except Exception:
                logger.exception("access: a token correction or a settlement failed")
                return
        else:
            task = asyncio.ensure_future(work)
        if task is not None:
            self._pending.add(task)
            task.add_done_callback(self._finished)

    def settle(self, spender: Spender, hold: Hold | None, samples: list[Sample]) -> None:
        """Settle a request's spend without waiting (``SpendLedger.settle_now``): booked at once in this process's
        own store, queued for its writer in Redis (no task of its own; ``settled`` waits for the writer)."""
        try:
            self.spend.settle_now(spender, hold, samples)
        except Exception:
            logger.exception("access: a token correction or a settlement failed")

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("access: a token correction or a settlement failed", exc_info=task.exception())

    async def settled(self) -> None:
        """Wait until every token correction handed to ``spawn`` so far is booked, and every settlement is written
        (or kept while Redis is away: ``SpendStore.flushed``)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.spend.store.flushed()

    async def aclose(self) -> None:
        await self.settled()
        await self.limiter.aclose()
        await self.spend.store.aclose()


class Ticket:
    """An admitted request's hold on its limits. ``release`` exactly once, when the response is done."""

    def __init__(
        self,
        state: AccessState,
        key: ClientKey,
        window: int,
        reserved: int,
        estimate: int,
        spender: Spender | None = None,
        choices: int = 1,
    ) -> None:
        self.state = state
        self.key = key
        self.window = window
        self.reserved = reserved
        self.prompt_estimate = estimate
        self.spender = spender or Spender.of(key.key_id, key.name, key.team, key.budget, None)
        self.choices = choices
        """How many answers the request asks for (``n``, ``best_of``)."""
        self.hold: Hold | None = None
        self.tally = UsageTally()
        self._released = False
        TALLY.set(self.tally)

    async def reserve(self, amount_usd: float, ttl_s: float, likely_usd: float | None = None) -> None:
        """Hold ``amount_usd`` against the key's and team's budgets, else ``likely_usd`` (``SpendLedger.reserve``;
        ``BudgetExceeded`` if neither fits)."""
        self.hold = await self.state.spend.reserve(self.spender, amount_usd, ttl_s, likely_usd)

    def used_tokens(self) -> int:
        if not self.tally.attempts:
            return 0
        prompt = self.tally.prompt_tokens if self.tally.prompt_tokens is not None else self.prompt_estimate
        return prompt + self.tally.output_tokens

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        TALLY.set(None)
        self.state.in_flight.release(self.key.key_id)
        if self.key.limits.tokens_per_minute:
            delta = self.used_tokens() - self.reserved
            if delta:
                self.state.spawn(
                    self.state.limiter.adjust(self.key.key_id, self.window, delta), local=self.state.local_limits
                )
        if self.hold is not None or self.tally.samples:
            # ``state.settle``, inline (one call fewer per request): booked at once, so no copy of the list to keep.
            try:
                self.state.spend.settle_now(self.spender, self.hold, self.tally.samples)
            except Exception:
                logger.exception("access: a token correction or a settlement failed")
        # Not a bound method of the ticket: the tally would then hold the ticket that holds it, a cycle per
        # request that only the collector's rare full passes free.
        self.tally.late = late_booking(self.state, self.key, self.window, self.spender, self.hold)


@dataclass(frozen=True, slots=True)
class LateBooking:
    """Books an attempt that ended after its request was released (a race's drained loser) on its own.

    Settled against the request's hold again: the hold was released once (a store releases a hold only
    while it is held), and its budgets are the ones the attempt's cost is booked to. Made per request by
    ``late_booking`` (every field in order: no frozen ``__init__`` setting each field through
    ``object.__setattr__``); nothing changes it after.
    """

    state: AccessState
    key: ClientKey
    window: int
    spender: Spender
    hold: Hold | None

    def __call__(self, sample: Sample) -> None:
        output = sample.billed_output_tokens
        if self.key.limits.tokens_per_minute and output:
            self.state.spawn(
                self.state.limiter.adjust(self.key.key_id, self.window, output), local=self.state.local_limits
            )
        self.state.settle(self.spender, self.hold, [sample])


late_booking = positional_maker(LateBooking)
"""``LateBooking(state, key, window, spender, hold)``, positionally (``gateway.frozen``)."""


class AccessControl:
    """Keys, models and limits of one config (rebuilt on reload), over the process-lived ``AccessState``."""

    def __init__(
        self, ring: KeyRing, admin: AdminKey, auth: AuthConfig, limits: LimitsConfig, state: AccessState
    ) -> None:
        self.ring = ring
        self.admin = admin
        self.auth = auth
        self.limits = limits
        self.state = state
        self.anonymous = ClientKey.anonymous(KeyLimits.defaults(limits))
        self._spenders: dict[str, tuple[ClientKey, Budget | None, Spender]] = {}
        """The ``Spender`` last made per key id, with the key and team budget it was made of."""
        # The store outlives the config: each config's keys say whether its outages refuse anyone.
        state.spend.store.budgeted = any(key.budget is not None or key.team in ring.teams for key in ring.keys)

    def authenticate(self, scope: Mapping[str, Any]) -> ClientKey:
        if not self.ring.enabled:
            if self.auth.allow_unauthenticated or _from_loopback(scope):
                return self.anonymous
            raise PermissionDenied("this gateway has no client keys configured and serves loopback clients only")
        presented = presented_key(scope["headers"])
        if presented is None:
            raise AuthenticationFailed("missing API key (send 'Authorization: Bearer <key>')")
        key = self.ring.authenticate(presented)
        if key is None:
            raise AuthenticationFailed("invalid API key")
        return key

    def require_admin(self, scope: Mapping[str, Any]) -> None:
        """Raise unless the request carries the admin key (or, with no keys at all, comes from loopback)."""
        presented = presented_key(scope["headers"])
        if self.admin.configured:
            if self.admin.matches(presented):
                return
            if self.ring.authenticate(presented) is not None:
                raise PermissionDenied("this endpoint needs the admin key")
            raise AuthenticationFailed("missing or invalid admin key")
        if not self.ring.enabled and _from_loopback(scope):
            return
        variable = f"${self.auth.admin_key_env}" if self.auth.admin_key_env else "[auth] admin_key_env"
        raise PermissionDenied(f"admin endpoints are disabled: no admin key is configured (set {variable})")

    def visible_models(self, key: ClientKey, models: list[str]) -> list[str]:
        return [name for name in models if key.allows(name)]

    async def admit(
        self,
        key: ClientKey,
        model: str,
        body: dict[str, Any],
        endpoint: Endpoint,
        prompt_tokens: int,
        max_tokens: int | None,
        length: Forecast | None = None,
        containers: int | None = None,
    ) -> Ticket:
        """Hold a place for this request within its key's and the replica's limits, or refuse it.

        Its tokens per minute hold its worst case while it fits, else, once the router's ``length`` forecast
        rests on enough answers, its likely use (``likely_output_tokens``); both are settled to the real count.
        ``containers``: a bound on the body's arrays and objects, if known (``limits.check_shape``).
        """
        if not key.allows(model):
            raise PermissionDenied(f"this API key may not use model '{model}'", param="model", code="model_not_allowed")
        choices = check_shape(body, endpoint, max_tokens, self.limits, containers)
        reserved = prompt_tokens + (max_tokens or 0) * choices
        likely = likely_output_tokens(length, max_tokens, choices) if max_tokens else None
        likely_reserved = prompt_tokens + likely if likely is not None else None
        tpm = key.limits.tokens_per_minute
        needed = min(reserved, likely_reserved) if likely_reserved is not None else reserved
        if tpm and needed > tpm:
            raise RateLimited(
                f"this request needs about {needed} tokens, more than the {tpm} tokens per minute "
                f"allowed to key '{key.name}'; send a smaller prompt or max_tokens",
                code="tokens_exceed_limit",
            )
        in_flight = self.state.in_flight
        refusal = in_flight.try_acquire(key.key_id, key.limits.max_in_flight, self.limits.max_in_flight)
        if refusal == "total":
            raise NoCapacity(
                f"the gateway is serving its maximum of {self.limits.max_in_flight} requests at once; retry shortly",
                code="overloaded",
                headers={"retry-after": "1"},
            )
        if refusal == "key":
            raise RateLimited(
                f"key '{key.name}' already has {key.limits.max_in_flight} requests in flight, its limit",
                code="too_many_requests_in_flight",
                headers={"retry-after": "1"},
            )
        rpm = key.limits.requests_per_minute
        try:
            decision = await self.state.limiter.acquire(key.key_id, reserved, rpm, tpm, likely_reserved)
        except BaseException:
            in_flight.release(key.key_id)
            raise
        if not decision.allowed:
            in_flight.release(key.key_id)
            if decision.limit == "tokens":
                what = f"{tpm} tokens per minute"
            else:
                what = f"{rpm} requests per minute"
            retry = retry_after_header(decision.retry_after_s)
            raise RateLimited(
                f"rate limit of {what} reached for key '{key.name}'; retry in {retry}s",
                headers={"retry-after": retry},
            )
        return Ticket(self.state, key, decision.window, decision.tokens, prompt_tokens, self.spender_of(key), choices)

    def spender_of(self, key: ClientKey) -> Spender:
        """Who pays for ``key``'s requests, with its budget and its team's.

        Made once per key (a ``Spender`` is immutable) and made again should the key or its team's budget be
        another object than the one it was made of."""
        team_budget = self.ring.teams.get(key.team) if key.team else None
        known = self._spenders.get(key.key_id)
        if known is not None and known[0] is key and known[1] is team_budget:
            return known[2]
        spender = Spender.of(key.key_id, key.name, key.team, key.budget, team_budget)
        self._spenders[key.key_id] = (key, team_budget, spender)
        return spender

    def spenders(self) -> list[Spender]:
        """Every configured key's (and the anonymous caller's, when there are none)."""
        keys = self.ring.keys if self.ring.enabled else (self.anonymous,)
        return [self.spender_of(key) for key in keys]

    async def reserve_spend(
        self,
        ticket: Ticket,
        deployments: Sequence[DeploymentConfig],
        max_tokens: int | None,
        default_output_tokens: int,
        endpoint: Endpoint,
        total_timeout_s: float,
        length: Forecast | None = None,
    ) -> None:
        """Hold the request's worst case against its budgets, before any provider is called.

        The worst case is the estimated prompt at the input price plus the output ceiling at the
        output price, at the dearest of ``deployments`` (the plan: every attempt, fallback, hedge
        or continuation goes to one of them). The output ceiling is the request's ``max_tokens``,
        else the gateway's ``[limits] max_tokens``, else the policy's ``default_output_tokens``
        (a request without a ceiling can then cost more than it held: settled at its real cost).
        When the worst case does not fit but the router's ``length`` forecast rests on enough answers,
        its likely cost (``gateway.admission.spending.ledger.likely_output_tokens``) is held instead.
        """
        if not ticket.spender.scopes:
            return
        if endpoint == "embeddings":
            output = 0
            likely_output = None
        else:
            ceiling = max_tokens or self.limits.max_tokens or default_output_tokens
            output = ceiling * ticket.choices
            likely_output = likely_output_tokens(length, ceiling, ticket.choices)
        amount = worst_case_usd(deployments, ticket.prompt_estimate, output)
        likely_usd = None
        if likely_output is not None and likely_output < output:
            likely_usd = worst_case_usd(deployments, ticket.prompt_estimate, likely_output)
        await ticket.reserve(amount, total_timeout_s + HOLD_MARGIN_S, likely_usd)

    async def observe_budgets(self, metrics: SpendMetrics) -> None:
        """Set the budget gauges from the store (at scrape time); left as they were if it cannot be read."""
        try:
            balances = await self.state.spend.balances(self.spenders())
        except SpendStoreDown:
            return
        metrics.observe_balances(balances)

    def degraded_reasons(self) -> list[str]:
        reasons = [self.state.limiter.degraded_reason(), self.state.spend.store.degraded_reason()]
        return [reason for reason in reasons if reason]


def _from_loopback(scope: Mapping[str, Any]) -> bool:
    client = scope.get("client")
    return client is not None and is_loopback(client[0])
