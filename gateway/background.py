"""Background tasks that say when they fail, and go on.

A task nobody awaits dies silently: its exception waits for a reader that never comes (asyncio
says only "Task exception was never retrieved", at garbage collection, with a traceback), and a
loop that died stops its work for good (no open circuit probed again, no gauge published) with
nothing in the log. ``every`` runs a long-lived loop's tick each ``interval_s``: an unexpected
error is logged once, in words (its type and clipped message, no traceback: messages here carry no
request content or key), and the loop goes on, its interval serving as the back-off; the same error
again is not repeated until a tick succeeds, which is said once (``gateway.conditions``).
``log_failure`` is the done callback of a one-shot task: its failure is logged in the same words, and retrieved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from gateway.conditions import ConditionLog
from gateway.errors import clip

logger = logging.getLogger("gateway")


def words(exc: BaseException) -> str:
    """An exception as one line for the log: its type, and its message cut short."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {clip(lines[0])}" if lines else type(exc).__name__


async def every(interval_s: Callable[[], float], tick: Callable[[], Awaitable[object]], what: str) -> NoReturn:
    """Wait ``interval_s()``, then run ``tick``; for ever (until cancelled), whatever a tick raises."""
    failures: ConditionLog[str] = ConditionLog(logger, logging.ERROR)  # each new way of failing, and the recovery
    while True:
        await asyncio.sleep(interval_s())
        try:
            await tick()
        except Exception as exc:  # the loop's outermost handler: one failed tick must not end the loop
            now = words(exc)
            failures.holds(what, now, "%s failed, trying again in %gs: %s", what, interval_s(), now)
        else:
            failures.ended(what, "%s working again", what)


def log_failure(what: str) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback for a one-shot task: its exception, if any, is retrieved and logged as ``what`` failed."""

    def done(task: asyncio.Future[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("%s failed: %s", what, words(exc))

    return done
