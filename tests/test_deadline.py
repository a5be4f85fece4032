"""``Deadline`` against ``asyncio.timeout``: the same outcome in every case, on asyncio's loop and on uvloop.

Each scenario runs once with ``asyncio.timeout`` and once with ``Deadline`` and must end the same way: which
exception leaves the block and the task (and its cause), how many cancellations the task still has pending,
what ran after the block, and no timer left scheduled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from gateway.relay.alarms import timers_left
from gateway.relay.deadline import Deadline

Scope = Callable[[float], Any]


def _old(delay: float) -> Any:
    return asyncio.timeout(delay)


class _New:
    """``Deadline`` behind an ``async with``, so that one scenario body serves both."""

    def __init__(self, delay: float) -> None:
        self.deadline = Deadline(delay)

    async def __aenter__(self) -> None:
        self.deadline.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.deadline.__exit__(*exc)


def _new(delay: float) -> Any:
    return _New(delay)


async def _in_time(scope: Scope, log: list[object]) -> None:
    async with scope(0.05):
        await asyncio.sleep(0)
        log.append("body")
    log.append("after")


async def _expires(scope: Scope, log: list[object]) -> None:
    try:
        async with scope(0.01):
            await asyncio.sleep(1)
    except TimeoutError as exc:
        log.append(("timeout", type(exc.__cause__).__name__))
    log.append("after")


async def _expires_at_once(scope: Scope, log: list[object]) -> None:
    try:
        async with scope(-1.0):
            log.append("entered")
            await asyncio.sleep(0)
            log.append("not reached")
    except TimeoutError:
        log.append("timeout")


async def _swallowed(scope: Scope, log: list[object]) -> None:
    # The body catches the cancellation and ends normally: nothing leaves the block, the cancel is taken back.
    async with scope(0.01):
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            log.append("caught")
    log.append("after")


async def _other_error(scope: Scope, log: list[object]) -> None:
    # The body turns the cancellation into another error: it leaves as is.
    try:
        async with scope(0.01):
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                raise ValueError("mine") from None
    except ValueError as exc:
        log.append(("value", str(exc)))


async def _inner_expires(scope: Scope, log: list[object]) -> None:
    # An inner deadline's TimeoutError is caught inside the outer block: the outer one is not touched.
    async with scope(0.5):
        try:
            async with scope(0.01):
                await asyncio.sleep(1)
        except TimeoutError:
            log.append("inner timeout")
        await asyncio.sleep(0)
        log.append("outer body goes on")
    log.append("after")


async def _outer_expires(scope: Scope, log: list[object]) -> None:
    # The outer deadline fires inside an inner block with a later deadline: the inner lets it through.
    try:
        async with scope(0.01):
            try:
                async with scope(1.0):
                    await asyncio.sleep(1)
            except TimeoutError:
                log.append("inner took it")
                raise
            except asyncio.CancelledError:
                log.append("inner passed cancel")
                raise
    except TimeoutError:
        log.append("outer timeout")


async def _cancelled_from_outside(scope: Scope, log: list[object]) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_later(0.005, task.cancel)
    async with scope(1.0):
        await asyncio.sleep(1)
    log.append("not reached")


async def _both(scope: Scope, log: list[object]) -> None:
    # The deadline fires and the task is cancelled from outside in the same turn: CancelledError goes on.
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    async with scope(0.01):
        loop.call_at(loop.time() + 0.01, task.cancel)
        # The loop held past both times: when it next looks, both are due and run in one turn, in the order set,
        # on a machine busy enough to wake the loop between two timers a millisecond apart too.
        time.sleep(0.03)
        await asyncio.sleep(1)
    log.append("not reached")


async def _nested_in_cancel(scope: Scope, log: list[object]) -> None:
    # Entered with a cancellation already pending and taken back: the deadline still turns its own into TimeoutError.
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        log.append(("cancelling", task.cancelling()))
    try:
        async with scope(0.01):
            await asyncio.sleep(1)
    except TimeoutError:
        log.append("timeout")
    except asyncio.CancelledError:
        log.append("cancelled")
    log.append(("cancelling", task.cancelling()))


SCENARIOS: dict[str, Callable[[Scope, list[object]], Awaitable[None]]] = {
    "in_time": _in_time,
    "expires": _expires,
    "expires_at_once": _expires_at_once,
    "swallowed": _swallowed,
    "other_error": _other_error,
    "inner_expires": _inner_expires,
    "outer_expires": _outer_expires,
    "cancelled_from_outside": _cancelled_from_outside,
    "both": _both,
    "nested_in_cancel": _nested_in_cancel,
}


def _pending_timers(loop: asyncio.AbstractEventLoop) -> int:
    # The loop's live timers, and the alarms pending on its one alarm timer (``gateway.relay.alarms``): that timer
    # itself, left armed with nothing pending, fires and runs nothing.
    return timers_left(loop)


async def _outcome(scope: Scope, scenario: Callable[[Scope, list[object]], Awaitable[None]]) -> tuple[Any, ...]:
    log: list[object] = []

    async def run() -> tuple[int, int]:
        task = asyncio.current_task()
        assert task is not None
        try:
            await scenario(scope, log)
        finally:
            log.append(("pending cancels", task.cancelling()))
        return 0, _pending_timers(asyncio.get_running_loop())

    task = asyncio.ensure_future(run())
    try:
        result: Any = await task
    except BaseException as exc:  # noqa: BLE001 - the outcome compared is the exception's type
        result = type(exc).__name__
    await asyncio.sleep(0.02)  # a timer left behind would fire here and cancel nothing, or show in the loop
    return result, tuple(log), _pending_timers(asyncio.get_running_loop())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_same_outcome_as_asyncio_timeout(name: str, loop_kind: str) -> None:
    scenario = SCENARIOS[name]
    runner = asyncio.run if loop_kind == "asyncio" else uvloop.run
    old = runner(_outcome(_old, scenario))
    new = runner(_outcome(_new, scenario))
    assert new == old
    assert new[2] == 0


def test_deadline_needs_a_task_and_one_use() -> None:
    async def twice() -> None:
        deadline = Deadline(1.0)
        with deadline:
            pass
        with pytest.raises(RuntimeError), deadline:
            pass

    asyncio.run(twice())

    raised: list[BaseException] = []

    def outside_task() -> None:
        try:
            with Deadline(1.0):
                pass
        except RuntimeError as exc:
            raised.append(exc)

    async def run() -> None:
        asyncio.get_running_loop().call_soon(outside_task)
        await asyncio.sleep(0.001)

    asyncio.run(run())
    assert len(raised) == 1


def test_timeout_error_is_raised_where_asyncio_raises_it() -> None:
    """The ``TimeoutError`` carries the ``CancelledError`` as its cause and leaves no cancellation pending."""

    async def run() -> tuple[bool, int]:
        task = asyncio.current_task()
        assert task is not None
        with contextlib.suppress(TimeoutError):
            with Deadline(0.001):
                await asyncio.sleep(1)
        return task.cancelled(), task.cancelling()

    assert asyncio.run(run()) == (False, 0)
