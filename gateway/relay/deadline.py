"""A deadline over a block of a request's task: ``asyncio.timeout``'s rules, as a plain ``with``.

``asyncio.timeout`` is an ``async with``: each use builds a ``Timeout`` and runs two coroutines
(``__aenter__``, ``__aexit__``) that never suspend, around the one loop timer that does the work.
A streamed request enters several such scopes (its first token, its relay, the wait for ``[DONE]``),
so on the hot path ``Deadline`` does the same with a ``with`` statement::

    with Deadline(first_token_s):          # instead of ``async with asyncio.timeout(first_token_s):``
        await ...                          # TimeoutError out of the block once the time is up

What it does is ``asyncio.timeout``'s (Python 3.11), step for step: the deadline is the loop's time
plus ``delay`` when it is made; entering needs a task, notes how many cancellations the task already
has pending and schedules one timer (on the next turn of the loop if the time is already up; else an alarm on the
loop's one timer, ``gateway.relay.alarms``, which fires as its own timer would); at
the time, the timer cancels the task. Leaving cancels the timer; if it had fired, the task's
cancellation is taken back (``uncancel``) and, when no other cancellation is pending and the block
ends in ``CancelledError``, that becomes ``TimeoutError`` (its cause the ``CancelledError``). So a
cancellation from outside (a client hang-up, a deadline further out) goes on as ``CancelledError``,
an inner deadline's ``TimeoutError`` is not taken for an outer one's, and no timer or alarm outlives its
block (the loop's alarm timer may stay armed, to find nothing to run). One use each, like ``asyncio.timeout``'s.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from gateway.relay.alarms import Alarm, alarm_at

_get_running_loop = asyncio.get_running_loop
_current_task = asyncio.current_task
_CancelledError = asyncio.CancelledError


class Deadline:
    """Cancels the current task ``delay`` seconds from now unless the block has ended; raises ``TimeoutError`` then."""

    __slots__ = ("_cancelling", "_expiring", "_handle", "_loop", "_task", "_when")

    def __init__(self, delay: float) -> None:
        loop = _get_running_loop()
        self._loop = loop
        self._when = loop.time() + delay
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.Handle | Alarm | None = None
        self._expiring = False
        self._cancelling = 0

    def __enter__(self) -> Deadline:
        if self._task is not None:
            raise RuntimeError("Deadline has already been entered")
        loop = self._loop
        task = _current_task(loop)
        if task is None:
            raise RuntimeError("Deadline should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        when = self._when
        if when <= loop.time():
            self._handle = loop.call_soon(self._on_timeout)
        else:
            self._handle = alarm_at(loop, when, self._on_timeout)  # ``call_at``'s, on the loop's one timer
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if self._expiring:
            self._expiring = False
            task = self._task
            assert task is not None
            if task.uncancel() <= self._cancelling and exc_type is _CancelledError:
                # No other cancellation is pending: this one was ours.
                raise TimeoutError from exc

    def _on_timeout(self) -> None:
        task = self._task
        assert task is not None
        task.cancel()
        self._expiring = True
        self._handle = None


__all__ = ["Deadline"]
