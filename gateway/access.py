"""Admission: the one place a request is authenticated, authorised and counted against its limits.

The inference endpoints call, cheapest refusal first::

    key = access.authenticate(scope)          # 401 (before the body is read)
    ...read and parse the body, find the model...
    ticket = await access.admit(key, model, body, endpoint, prompt_tokens, max_tokens)
                                              # 403 model, 400 shape, 503/429 in flight, 429 rate
    try: ...serve...
    finally: ticket.release()

``admit`` reserves ``prompt estimate + max_tokens × n`` tokens against the key's per-minute
budget. The attempts' samples (``USAGE_TAP``, a sample sink) add up what was actually produced
for this request, and ``release`` books the difference. The tally reaches the sink through a
context variable set in the request's task: samples are recorded in that task or in tasks it
spawns, which inherit it, so no layer in between has to pass it along.

Admin endpoints call ``gateway.runtime.require_admin(request)``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.auth import AdminKey, ClientKey, KeyLimits, KeyRing, is_loopback, presented_key
from gateway.config import AuthConfig, LimitsConfig
from gateway.errors import AuthenticationFailed, NoCapacity, PermissionDenied, RateLimited
from gateway.limits import InFlight, check_shape
from gateway.ratelimit import RateLimiter, retry_after_header
from gateway.samples import Endpoint, Sample

logger = logging.getLogger("gateway.access")


@dataclass(slots=True)
class UsageTally:
    """Tokens one request actually used, summed over its attempts."""

    output_tokens: int = 0
    prompt_tokens: int | None = None
    """As the provider reported it; None when none did."""
    attempts: int = 0


_tally: contextvars.ContextVar[UsageTally | None] = contextvars.ContextVar("gateway_usage_tally", default=None)


class UsageTap:
    """A sample sink that adds each attempt's usage to the tally of the request it belongs to."""

    def record(self, sample: Sample) -> None:
        tally = _tally.get()
        if tally is None:
            return
        tally.attempts += 1
        output = sample.usage_completion_tokens if sample.usage_completion_tokens is not None else sample.output_tokens
        tally.output_tokens += output or 0
        if sample.usage_prompt_tokens is not None:
            tally.prompt_tokens = sample.usage_prompt_tokens


USAGE_TAP = UsageTap()


class AccessState:
    """What admission keeps for the life of the process (a reloaded config keeps counting).

    Owns the rate limiter; ``aclose`` waits for pending token corrections, then closes it.
    """

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        self.in_flight = InFlight()
        self._pending: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("rate limits: a token correction failed", exc_info=task.exception())

    async def settled(self) -> None:
        """Wait until every token correction handed to ``spawn`` so far is booked."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def aclose(self) -> None:
        await self.settled()
        await self.limiter.aclose()


class Ticket:
    """An admitted request's hold on its limits. ``release`` exactly once, when the response is done."""

    def __init__(self, state: AccessState, key: ClientKey, window: int, reserved: int, estimate: int) -> None:
        self.state = state
        self.key = key
        self.window = window
        self.reserved = reserved
        self.prompt_estimate = estimate
        self.tally = UsageTally()
        self._released = False
        _tally.set(self.tally)

    def used_tokens(self) -> int:
        if not self.tally.attempts:
            return 0
        prompt = self.tally.prompt_tokens if self.tally.prompt_tokens is not None else self.prompt_estimate
        return prompt + self.tally.output_tokens

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        _tally.set(None)
        self.state.in_flight.release(self.key.key_id)
        if self.key.limits.tokens_per_minute:
            delta = self.used_tokens() - self.reserved
            if delta:
                self.state.spawn(self.state.limiter.adjust(self.key.key_id, self.window, delta))


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
    ) -> Ticket:
        """Hold a place for this request within its key's and the replica's limits, or refuse it."""
        if not key.allows(model):
            raise PermissionDenied(f"this API key may not use model '{model}'", param="model", code="model_not_allowed")
        choices = check_shape(body, endpoint, max_tokens, self.limits)
        reserved = prompt_tokens + (max_tokens or 0) * choices
        tpm = key.limits.tokens_per_minute
        if tpm and reserved > tpm:
            raise RateLimited(
                f"this request needs about {reserved} tokens, more than the {tpm} tokens per minute "
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
        try:
            decision = await self.state.limiter.acquire(key.key_id, reserved, key.limits.requests_per_minute, tpm)
        except BaseException:
            in_flight.release(key.key_id)
            raise
        if not decision.allowed:
            in_flight.release(key.key_id)
            if decision.limit == "tokens":
                what = f"{tpm} tokens per minute"
            else:
                what = f"{key.limits.requests_per_minute} requests per minute"
            retry = retry_after_header(decision.retry_after_s)
            raise RateLimited(
                f"rate limit of {what} reached for key '{key.name}'; retry in {retry}s",
                headers={"retry-after": retry},
            )
        return Ticket(self.state, key, decision.window, reserved, prompt_tokens)

    def degraded_reasons(self) -> list[str]:
        reason = self.state.limiter.degraded_reason()
        return [reason] if reason else []


def _from_loopback(scope: Mapping[str, Any]) -> bool:
    client = scope.get("client")
    return client is not None and is_loopback(client[0])
