"""Run a coroutine at once, on the caller's stack, and hand it to a task only if it has to wait.

Bookkeeping that follows a request (settling its spend, correcting its token count) is a coroutine
because a Redis store waits on the network; the in-memory stores never wait. Started as a task, each
would cost a task, a turn of the loop and a done callback per request, for work done in one step.
``start_eagerly`` runs it until it first waits: finished by then, no task is made; otherwise the task
goes on from where it stopped (what asyncio's eager task factory does from Python 3.12).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any


class _Started:
    """A coroutine already started, which waits on ``pending``: awaiting this goes on with it from there."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, None], pending: Any) -> None:
        self._coro = coro
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, None]:
        coro, pending = self._coro, self._pending
        self._pending = None
        while True:
            try:
                value = yield pending
            except BaseException as exc:  # the task's cancellation (or any error thrown in), passed on
                try:
                    pending = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    pending = coro.send(value)
                except StopIteration:
                    return


async def _go_on(started: _Started) -> None:
    await started


def start_eagerly(work: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``work`` until it finishes or first waits; None when it finished (its error, if any, raised here),
    else the task that finishes it. Call on the event loop's thread, inside the loop."""
    try:
        pending = work.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_go_on(_Started(work, pending)))


__all__ = ["start_eagerly"]
