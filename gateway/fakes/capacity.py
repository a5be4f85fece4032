"""A fake provider's capacity: N slots, with a line behind them or a 429 above them.

Real providers have a concurrency they serve at; past it they either queue (the first token
comes later the more are waiting: self-hosted vLLM, most serverless endpoints) or refuse with a
429 carrying their rate-limit headers. ``FakeBehavior.slots`` and ``over_slots`` play either,
so the gateway's waiting, overflow and learned limits can be tested against a known capacity.
"""

from __future__ import annotations

import asyncio
from collections import deque

from gateway.fakes.asgi import Disconnect


class Slots:
    """``size`` slots taken in arrival order; ``size`` may change (a provider that tightens or loosens)."""

    def __init__(self) -> None:
        self.busy = 0
        self._line: deque[asyncio.Future[None]] = deque()

    def full(self, size: int) -> bool:
        return self.busy >= size

    async def take(self, size: int, disconnect: Disconnect) -> bool:
        """Take a slot, waiting in line for one; False when the client hung up while waiting."""
        if self.busy < size and not self._line:
            self.busy += 1
            return True
        turn = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        gone = asyncio.ensure_future(disconnect.event.wait())
        try:
            await asyncio.wait((turn, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if turn.done():
            return True  # handed over by ``give_back``: busy already counts it
        turn.cancel()
        self._line.remove(turn)
        return False

    def give_back(self, size: int) -> None:
        """Free a slot: hand it to the next in line, if there is room for one under ``size``."""
        self.busy -= 1
        while self._line and self.busy < size:
            turn = self._line.popleft()
            if not turn.done():
                self.busy += 1
                turn.set_result(None)
