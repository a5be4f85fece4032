"""``FirstByteKeepAlive.stop_waiting`` then ``stop`` when needed, against ``stop`` awaited always (the old path).

Before the first keep-alive is due, both leave no timer scheduled and nothing sent; once keep-alives are being sent,
``stop_waiting`` declines and ``stop`` ends them as before, with the same messages sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from gateway.dialects import dialect_for
from gateway.relay.alarms import timers_left
from gateway.relay.keepalive import FirstByteKeepAlive


def _live_timers(loop: asyncio.AbstractEventLoop) -> int:
    # The loop's live timers, and the alarms pending on its one alarm timer (``gateway.relay.alarms``): that timer
    # itself, left armed with nothing pending, fires and runs nothing.
    return timers_left(loop)


async def _run(wait_s: float, old: bool) -> tuple[Any, ...]:
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    loop = asyncio.get_running_loop()
    before = _live_timers(loop)
    keeper = FirstByteKeepAlive(send, dialect_for("chat"), 0.05, [(b"x-request-id", b"r")], request_id="r")
    keeper.start()
    await asyncio.sleep(wait_s)
    if old:
        await keeper.stop()
        declined = None
    else:
        declined = not keeper.stop_waiting()
        if declined:
            await keeper.stop()
    left = _live_timers(loop) - before
    count = len(sent)
    await asyncio.sleep(0.12)  # nothing more goes out after the stop
    return keeper.started, keeper.sent, [m["type"] for m in sent], count == len(sent), left, declined


@pytest.mark.parametrize("wait_s", [0.0, 0.01, 0.07, 0.13])
def test_stop_waiting_ends_as_stop_did(wait_s: float) -> None:
    *old, _ = asyncio.run(_run(wait_s, old=True))
    *new, declined = asyncio.run(_run(wait_s, old=False))
    assert new == old
    assert old[4] == 0  # no timer left
    assert declined == (wait_s > 0.05)
