"""One loop timer for a request's many deadlines: alarms kept in a heap per event loop, each fired at its time.

Every streamed request arms and almost always cancels the same few timers (the first byte's keep-alive, the first
token's deadline, the relay's total deadline). On uvloop each ``call_at`` is a libuv timer made, started, stopped and
freed; here an alarm is an entry pushed on the loop's heap and marked when cancelled, and one loop timer stands for
the earliest entry. Nearly every new alarm falls later than the one the timer is armed for, so the loop timer is
made again only when it fires (or for an alarm earlier than any pending).

What an alarm does is what the loop's timer did: its callback runs once, from the loop, at its time (entries due
together in the order they were set, as libuv runs its timers), never after ``cancel``. Cancelled entries are dropped
when they reach the top of the heap, or all at once when they are most of it, so the heap stays within about twice the
pending alarms. The loop timer of an emptied heap is left to fire and find nothing (cancelling it would cost what the
heap saves); it holds no request.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

_COMPACT_AT = 64
"""Cancelled entries before the heap is rebuilt without them (once they are also half of it)."""
_ATTRIBUTE = "_gateway_alarms"
"""Where a loop keeps its ``Alarms`` (uvloop's and asyncio's loops take attributes)."""


class Alarm:
    """A callback due at a time of its loop; ``cancel`` before then and it never runs (``TimerHandle``'s contract)."""

    __slots__ = ("_callback", "_alarms")

    def __init__(self, callback: Callable[[], object], alarms: Alarms) -> None:
        self._callback: Callable[[], object] | None = callback
        self._alarms: Alarms | None = alarms

    def cancel(self) -> None:
        alarms = self._alarms
        if alarms is None:  # fired, or cancelled already
            return
        self._alarms = None
        self._callback = None
        alarms.dropped()

    def cancelled(self) -> bool:
        """Whether it was cancelled, or has fired (it can no longer run)."""
        return self._alarms is None


class Alarms:
    """A loop's pending alarms, a heap of (time, order, alarm), and the one loop timer armed for the earliest."""

    __slots__ = ("_loop", "_heap", "_order", "_dead", "_armed_at", "_handle")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._dead = 0
        self._armed_at = float("inf")
        self._handle: asyncio.TimerHandle | None = None

    def at(self, when: float, callback: Callable[[], object]) -> Alarm:
        """``callback`` at the loop's time ``when`` (``loop.call_at``'s), unless cancelled before."""
        alarm = Alarm(callback, self)
        heapq.heappush(self._heap, (when, next(self._order), alarm))
        if when < self._armed_at:
            self._arm(when)
        return alarm

    def dropped(self) -> None:
        """One alarm was cancelled: rebuild the heap once cancelled entries are many and most of it."""
        self._dead += 1
        heap = self._heap
        if self._dead > _COMPACT_AT and self._dead * 2 > len(heap):
            # In place: a callback that cancels alarms while ``_fire`` pops this heap pops the same list.
            heap[:] = [entry for entry in heap if entry[2]._alarms is not None]
            heapq.heapify(heap)
            self._dead = 0

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        """Run every alarm due: those of the time the timer was armed for and any already past, in order."""
        due = max(self._armed_at, self._loop.time())
        self._handle = None
        self._armed_at = float("inf")
        heap = self._heap
        while heap and heap[0][0] <= due:
            alarm = heapq.heappop(heap)[2]
            callback = alarm._callback
            if alarm._alarms is None or callback is None:
                self._dead -= 1
                continue
            alarm._alarms = None
            alarm._callback = None
            try:
                callback()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # as the loop reports a timer's callback that raised
                self._loop.call_exception_handler(
                    {"message": f"Exception in callback {callback!r}", "exception": exc, "alarm": alarm}
                )
        while heap and heap[0][2]._alarms is None:  # the cancelled on top go now: the timer is armed for a live one
            heapq.heappop(heap)
            self._dead -= 1
        if heap:
            self._arm(heap[0][0])

    def pending(self) -> int:
        """Alarms set and neither fired nor cancelled."""
        return sum(1 for _, _, alarm in self._heap if alarm._alarms is not None)


def timers_left(loop: asyncio.AbstractEventLoop) -> int:
    """Timers on ``loop`` that would still run something: its live timer handles (asyncio's loop lists them; uvloop
    does not) other than the alarms' own, and the alarms pending. What the tests count to see nothing left behind."""
    alarms: Alarms | None = getattr(loop, _ATTRIBUTE, None)
    own = alarms._handle if alarms is not None else None
    handles = sum(1 for handle in getattr(loop, "_scheduled", ()) if not handle.cancelled() and handle is not own)
    return handles + (alarms.pending() if alarms is not None else 0)


def alarms_of(loop: asyncio.AbstractEventLoop) -> Alarms:
    """The loop's ``Alarms``, made on first use."""
    alarms: Alarms | None = getattr(loop, _ATTRIBUTE, None)
    if alarms is None:
        alarms = Alarms(loop)
        setattr(loop, _ATTRIBUTE, alarms)
    return alarms


def alarm_at(loop: asyncio.AbstractEventLoop, when: float, callback: Callable[[], object]) -> Alarm:
    """``loop.call_at(when, callback)``, as an alarm on the loop's one timer."""
    return alarms_of(loop).at(when, callback)


__all__ = ["Alarm", "Alarms", "alarm_at", "alarms_of", "timers_left"]
