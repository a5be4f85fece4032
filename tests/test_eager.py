"""``start_eagerly``: a coroutine run at once, handed to a task only when it has to wait, and then finished by it
exactly as it would have run in a task of its own (results, errors, cancellation)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.eager import start_eagerly


def test_a_coroutine_that_never_waits_is_done_at_once_without_a_task() -> None:
    done: list[str] = []

    async def book() -> None:
        done.append("booked")

    async def main() -> None:
        before = len(asyncio.all_tasks())
        assert start_eagerly(book()) is None
        assert done == ["booked"]  # before the caller's next line
        assert len(asyncio.all_tasks()) == before

    asyncio.run(main())


def test_a_coroutine_that_waits_goes_on_in_a_task_from_where_it_stopped() -> None:
    steps: list[str] = []

    async def book(ready: asyncio.Event, answer: asyncio.Future[int]) -> None:
        steps.append("started")
        await ready.wait()
        steps.append(f"got {await answer}")
        await asyncio.sleep(0)
        steps.append("done")

    async def main() -> None:
        ready = asyncio.Event()
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = start_eagerly(book(ready, answer))
        assert task is not None and steps == ["started"]
        ready.set()
        answer.set_result(7)
        await task
        assert steps == ["started", "got 7", "done"]

    asyncio.run(main())


def test_errors_come_out_where_they_happen_and_cancellation_reaches_the_coroutine() -> None:
    cleaned: list[str] = []

    async def fails_at_once() -> None:
        raise ValueError("at once")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("finally")

    async def main() -> None:
        with pytest.raises(ValueError, match="at once"):
            start_eagerly(fails_at_once())
        later = start_eagerly(fails_later())
        assert later is not None
        with pytest.raises(ValueError, match="later"):
            await later
        forever = start_eagerly(waits_forever())
        assert forever is not None
        await asyncio.sleep(0)
        forever.cancel()
        with pytest.raises(asyncio.CancelledError):
            await forever
        assert cleaned == ["finally"]

    asyncio.run(main())
