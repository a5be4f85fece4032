"""Refusing a request for capacity: what it waited for, the 429 it gets, and the rate-limited log line.

``AttemptRunner.start_first`` uses these only when every deployment of a model is full; none of
it is on the path of a request that gets a slot.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from gateway.errors import RateLimited
from gateway.relay.queue import SlotQueue, slot_key
from gateway.routing import Candidate
from gateway.types import Clock

logger = logging.getLogger("gateway")
REFUSAL_LOG_S = 10.0
"""A model's capacity refusals are logged at most this often (each line counts the ones in between)."""


def waited_slots(full: Sequence[Candidate]) -> list[str]:
    """What a request whose every candidate is full waits for: each one's deployment, or its provider's ceiling."""
    return [name for c in full for name in (slot_key((c.model, c.name)), c.provider.name)]


_WHY = {"capacity_queue_full": "its queue is full", "capacity_wait_timeout": "no slot freed in time"}


def capacity_refusal(queue: SlotQueue, model: str, full: Sequence[Candidate], code: str, detail: str) -> RateLimited:
    """The 429 for a request that found every deployment of ``model`` full, with the queue's ``Retry-After``;
    ``code`` says why it waits no longer (``_WHY``), ``detail`` how many wait or how long it waited."""
    providers = list(dict.fromkeys(c.provider.name for c in full))
    retry = queue.retry_after_s(model, [slot_key((c.model, c.name)) for c in full])
    message = (
        f"every deployment of model '{model}' is at its concurrency limit ({', '.join(providers)}) and "
        f"{_WHY[code]} ({detail}); retry after {retry}s"
    )
    return RateLimited(message, code=code, headers={"retry-after": str(retry)})


class RefusalLog:
    """Says why requests were refused for capacity: at once, then at most every ``REFUSAL_LOG_S`` per model
    (with how many were refused meanwhile), so a burst is one line, not one per request."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._refusals: dict[str, tuple[float, int]] = {}
        """Per model: when a capacity refusal was last logged, and how many were refused since."""

    def log(self, model: str, refusal: RateLimited) -> None:
        now = self.clock()
        last, count = self._refusals.get(model, (-math.inf, 0))
        if now - last < REFUSAL_LOG_S:
            self._refusals[model] = (last, count + 1)
            return
        more = f" ({count} more refused in the last {now - last:.0f} s)" if count else ""
        logger.warning("request for model %s refused for capacity: %s%s", model, refusal.message, more)
        self._refusals[model] = (now, 0)
