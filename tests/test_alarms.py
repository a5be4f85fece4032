"""``gateway.relay.alarms``: an alarm runs as the loop timer it replaces would (once, at its time, in time order, never
after ``cancel``), on asyncio's loop and on uvloop; the heap keeps no more than about twice the pending alarms."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from gateway.relay.alarms import _COMPACT_AT, Alarm, alarm_at, alarms_of, timers_left

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def _run(kind: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    runner = asyncio.Runner(loop_factory=LOOPS[kind])
    try:
        return runner.run(main())
    finally:
        runner.close()


async def _schedule(seed: int, use_alarms: bool) -> tuple[list[int], list[int], int]:
    """Thirty timers over ~60 ms, a third cancelled (those due after 10 ms at once, the others well after they
    ran); (what ran in the order it ran, what ran earlier than its time, timers left)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    ran: list[int] = []
    early: list[int] = []
    start = loop.time()
    delays = sorted(rng.sample(range(1, 60), 30))  # distinct times: the order is the times'
    handles: list[Any] = []
    for index in rng.sample(range(30), 30):  # set in no particular order
        when = start + delays[index] / 1000

        def fire(index: int = index, when: float = when) -> None:
            ran.append(index)
            if loop.time() < when - 0.002:
                early.append(index)

        handles.append((index, alarm_at(loop, when, fire) if use_alarms else loop.call_at(when, fire)))
    doomed = {i for i in range(30) if rng.random() < 0.33}
    for index, handle in handles:
        if index in doomed and delays[index] >= 10:
            handle.cancel()
    await asyncio.sleep(0.025)
    for index, handle in handles:
        if index in doomed and delays[index] < 10:
            handle.cancel()  # after it ran: a no-op
    await asyncio.sleep(0.08)
    return ran, early, timers_left(loop)


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_alarms_run_what_loop_timers_run_in_the_same_order(kind: str) -> None:
    for seed in range(5):
        old = _run(kind, functools.partial(_schedule, seed, False))
        new = _run(kind, functools.partial(_schedule, seed, True))
        # The same ones run, none early, nothing left; the alarms in time order. (uvloop runs timers that were already
        # due when set, as on a machine that stalls the loop while they are being set, in the order they were set.)
        assert sorted(new[0]) == sorted(old[0]) and new[1:] == old[1:]
        assert new[0] == sorted(new[0]) and new[1] == [] and new[2] == 0


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_alarms_due_together_run_in_the_order_set_and_a_cancelled_one_never(kind: str) -> None:
    async def main() -> tuple[list[str], bool, bool]:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        when = loop.time() + 0.01
        made = {name: alarm_at(loop, when, functools.partial(ran.append, name)) for name in "abcdef"}
        made["c"].cancel()
        made["c"].cancel()  # twice: nothing more
        late = alarm_at(loop, when + 0.005, lambda: ran.append("late"))
        await asyncio.sleep(0.03)
        fired: Alarm = made["a"]
        fired.cancel()  # after it ran: nothing
        return ran, fired.cancelled() and late.cancelled(), timers_left(loop) == 0

    assert _run(kind, main) == (["a", "b", "d", "e", "f", "late"], True, True)


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_an_alarm_set_by_an_alarm_or_earlier_than_all_runs_and_one_that_raises_is_reported(kind: str) -> None:
    async def main() -> tuple[list[str], list[str]]:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        reported: list[str] = []
        loop.set_exception_handler(lambda _, context: reported.append(str(context["exception"])))
        now = loop.time()

        def chain() -> None:
            ran.append("first")
            # Due before the next pending alarm whenever this one runs (a loaded machine may run it late).
            alarm_at(loop, now + 0.015, lambda: ran.append("set by the first"))

        def boom() -> None:
            raise ValueError("boom")

        alarm_at(loop, now + 0.05, lambda: ran.append("last"))
        alarm_at(loop, now + 0.01, chain)  # earlier than the one the timer waits for
        alarm_at(loop, now + 0.02, boom)
        alarm_at(loop, now + 0.02, lambda: ran.append("after the raise"))
        await asyncio.sleep(0.08)
        return ran, reported

    assert _run(kind, main) == (["first", "set by the first", "after the raise", "last"], ["boom"])


def test_the_heap_holds_about_twice_the_pending_alarms() -> None:
    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        alarms = alarms_of(loop)
        held = [alarm_at(loop, loop.time() + 600, lambda: None) for _ in range(10)]
        longest = 0
        for _ in range(20_000):  # requests: each sets an alarm and cancels it
            alarm_at(loop, loop.time() + 600, lambda: None).cancel()
            longest = max(longest, len(alarms._heap))
        pending = alarms.pending()
        for alarm in held:
            alarm.cancel()
        return longest, pending

    longest, pending = uvloop.run(main())
    assert pending == 10
    assert longest <= 2 * 10 + _COMPACT_AT + 2


def test_an_alarm_that_cancels_many_runs_each_other_once() -> None:
    """A callback cancelling enough alarms to rebuild the heap while the due ones are being run: each runs once."""

    async def main() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        ran: list[int] = []
        when = loop.time() + 0.01
        doomed = [alarm_at(loop, when + 1, lambda: ran.append(-1)) for _ in range(3 * _COMPACT_AT)]

        def cancel_all() -> None:
            ran.append(0)
            for alarm in doomed:
                alarm.cancel()

        alarm_at(loop, when, cancel_all)
        for index in range(1, 6):
            alarm_at(loop, when, functools.partial(ran.append, index))
        await asyncio.sleep(0.03)
        return ran, alarms_of(loop).pending()

    assert uvloop.run(main()) == ([0, 1, 2, 3, 4, 5], 0)
