"""Waiting for a slot: requests whose every candidate is full, in line per model, woken as slots free.

A burst larger than the deployments' limits is not refused: the requests past the limits wait here,
first come first served, and each freed slot (``AttemptRunner.record``) wakes the oldest waiter
that could use that deployment (``slot_key``), or else the oldest waiting on its provider's ceiling,
whatever its model. The waiter then tries its candidates again (``AttemptRunner.start_first``); one
that finds its slot taken by then goes back to the head of the line. While anyone waits for a
deployment, a fresh request does not take that deployment's free slot ahead of them (it joins the
line instead), so the line stays fair under a steady stream. Lines are per deployment, not per
provider: a model whose deployment is full never queues another model on the same provider.

The wait is bounded by the policy's ``queue_timeout_s`` and the request's own deadline, the line
by ``queue_max_length``; a client that hangs up leaves at once (its task is cancelled). Refusals
carry a ``Retry-After`` from what the gateway sees: how fast slots free at the providers the
request could use, and how many wait ahead of it. Not thread-safe: one event loop owns it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.types import Clock, DeploymentKey

TURNOVER_HALF_LIFE_S = 2.0
"""How quickly the slot-turnover rate forgets: a few seconds, the scale of a burst."""
MAX_CLIENT_RETRY_AFTER_S = 60
"""The longest ``Retry-After`` told to a client refused for capacity (an upstream's own is capped apart:
``gateway.routing.health.MAX_RETRY_AFTER_S``)."""


def slot_key(key: DeploymentKey) -> str:
    """The name a deployment's slots go by in the line (a provider's ceiling goes by the provider's name)."""
    return f"{key[0]}\x00{key[1]}"


@dataclass(slots=True)
class _Waiter:
    seq: int
    model: str
    providers: frozenset[str]
    woken: asyncio.Future[None]


@dataclass(slots=True)
class _Turnover:
    """Slots freed per second at one provider, a moving average that decays with time."""

    rate: float = 0.0
    at: float = 0.0

    def add(self, now: float) -> None:
        decay = 0.5 ** ((now - self.at) / TURNOVER_HALF_LIFE_S) if self.at else 0.0
        self.rate = self.rate * decay + math.log(2) / TURNOVER_HALF_LIFE_S
        self.at = now

    def per_s(self, now: float) -> float:
        return self.rate * 0.5 ** ((now - self.at) / TURNOVER_HALF_LIFE_S) if self.at else 0.0


@dataclass
class SlotQueue:
    """One per gateway process (carried over config reloads, as the router's state is). Usage::

    seq = await queue.wait(model, slots, timeout_s)   # woken for a freed slot (raises TimeoutError)
    ...
    queue.released(slot, provider)                    # an attempt at a deployment of provider ended
    """

    clock: Clock = time.perf_counter
    _lines: dict[str, deque[_Waiter]] = field(default_factory=dict)
    _waiting_for: dict[str, int] = field(default_factory=dict)
    _turnover: dict[str, _Turnover] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def depth(self, model: str) -> int:
        line = self._lines.get(model)
        return len(line) if line else 0

    def contended(self, slot: str) -> bool:
        """Someone waits for a slot at ``slot``: a fresh request must not take one ahead of them."""
        return self._waiting_for.get(slot, 0) > 0

    async def wait(self, model: str, providers: Iterable[str], timeout_s: float, *, seq: int | None = None) -> int:
        """Wait for a slot at one of ``providers`` (slot keys, and provider names for a ceiling) for up to
        ``timeout_s``; returns the waiter's place.

        Raises ``TimeoutError`` when the time is up. A waiter woken but beaten to the slot passes
        its place back (``seq``) to rejoin at the head of the line. Cancellation (the client hung
        up) leaves the line at once.
        """
        loop = asyncio.get_running_loop()
        waiter = _Waiter(next(self._seq) if seq is None else seq, model, frozenset(providers), loop.create_future())
        line = self._lines.setdefault(model, deque())
        if seq is not None and (not line or line[0].seq > seq):
            line.appendleft(waiter)
        else:
            line.append(waiter)
        for name in waiter.providers:
            self._waiting_for[name] = self._waiting_for.get(name, 0) + 1
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await waiter.woken
        except TimeoutError:
            if waiter.woken.done() and not waiter.woken.cancelled():
                return waiter.seq  # woken just as the time ran out: the slot is this waiter's
            raise
        except BaseException:
            if waiter.woken.done() and not waiter.woken.cancelled():
                # Woken for a slot, but the client hung up: the slot goes to the next in line.
                for name in waiter.providers:
                    self._wake_oldest(name)
            raise
        finally:
            # Timed out or cancelled (awaiting the future cancels it with the task): leave the line.
            if not waiter.woken.done() or waiter.woken.cancelled():
                waiter.woken.cancel()
                self._leave(waiter)
        return waiter.seq

    def released(self, slot: str, provider: str) -> None:
        """A slot at ``slot`` (a deployment of ``provider``) freed: wake the oldest waiter, of any model, that can
        use that deployment, or else the oldest waiting for room under the provider's ceiling."""
        turnover = self._turnover.get(slot)
        if turnover is None:
            turnover = self._turnover[slot] = _Turnover()
        turnover.add(self.clock())
        if not self._wake_oldest(slot):
            self._wake_oldest(provider)

    def _wake_oldest(self, provider: str) -> bool:
        if not self._waiting_for.get(provider):
            return False
        oldest: _Waiter | None = None
        for line in self._lines.values():
            for waiter in line:
                if provider in waiter.providers and not waiter.woken.done():
                    if oldest is None or waiter.seq < oldest.seq:
                        oldest = waiter
                    break
        if oldest is None:
            return False
        self._leave(oldest)
        oldest.woken.set_result(None)
        return True

    def retry_after_s(self, model: str, providers: Iterable[str]) -> int:
        """Seconds until a request refused now would likely find a slot: those waiting ahead of it over
        the slots freed per second at its providers; at least 1, at most a minute."""
        now = self.clock()
        rate = sum(t.per_s(now) for name in providers if (t := self._turnover.get(name)) is not None)
        if rate <= 0:
            return 1
        return max(1, min(MAX_CLIENT_RETRY_AFTER_S, math.ceil((self.depth(model) + 1) / rate)))

    def _leave(self, waiter: _Waiter) -> None:
        line = self._lines.get(waiter.model)
        if line is not None:
            try:
                line.remove(waiter)
            except ValueError:
                return
            if not line:
                del self._lines[waiter.model]
        for name in waiter.providers:
            count = self._waiting_for.get(name, 0) - 1
            if count > 0:
                self._waiting_for[name] = count
            else:
                self._waiting_for.pop(name, None)
