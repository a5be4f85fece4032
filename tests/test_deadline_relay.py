"""The request deadlines that ``Deadline`` keeps, whole requests in process: each ends as under ``asyncio.timeout``.

Every scenario runs the gateway's app (``benchmarks.hotpath_memory``: the real runtime, the provider's client
answering from memory) twice, once with ``Deadline`` and once with ``asyncio.timeout`` itself put in its place,
and compares what the client received, the attempts' recorded outcomes, what was logged, how the request's task
ended, and the timers left on the loop after the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import tomllib
from collections.abc import Coroutine, Iterator
from types import TracebackType
from typing import Any

import pytest

from benchmarks.hotpath_memory import BENCH_CONFIG, Driver, MemoryResponse, stream_chunks
from gateway.app import create_app
from gateway.config import parse_config
from gateway.relay import replies, runner
from gateway.relay.alarms import timers_left
from gateway.relay.deadline import Deadline
from gateway.runtime import runtime_of


def _run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (``Timeout.__aenter__``/``__aexit__``) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("suspended")


class AsyncioTimeout:
    """``asyncio.timeout`` itself behind a plain ``with``: its own ``__aenter__`` and ``__aexit__``, run at once."""

    def __init__(self, delay: float) -> None:
        self.timeout = asyncio.timeout(delay)

    def __enter__(self) -> None:
        _run_now(self.timeout.__aenter__())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        result: bool | None = _run_now(self.timeout.__aexit__(exc_type, exc, tb))
        return result


class Upstream:
    """The provider's client: ``chunks`` then, with ``hang``, a read that never returns (no ``[DONE]``, or nothing)."""

    def __init__(self, chunks: list[bytes], hang: bool, waits: bool = False) -> None:
        self.chunks = chunks
        self.hang = hang
        self.waits = waits
        self.thought_signers: set[str] = set()
        self.refused_fields: set[str] = set()
        self.short_tool_ids = False

    async def send(self, path: str, body: bytes, timeouts: Any, headers: Any = (), api: str = "chat") -> Any:
        return HangingResponse(self.chunks, self.hang, self.waits)

    def redact(self, data: bytes) -> bytes:
        return data

    async def aclose(self) -> None:
        pass


class HangingResponse(MemoryResponse):
    """``waits``: ``read_ready`` always says a read would wait (as a real upstream whose next bytes are not in)."""

    def __init__(self, chunks: list[bytes], hang: bool, waits: bool = False) -> None:
        super().__init__(chunks, "text/event-stream")
        self.hang = hang
        self.waits = waits

    async def read_chunk(self) -> bytes:
        chunk = await super().read_chunk()
        if not chunk and self.hang:
            await asyncio.Event().wait()
        return chunk

    def read_ready(self) -> bytes | None:
        if self.waits:
            return None
        chunk = super().read_ready()
        return None if not chunk and self.hang else chunk  # the read that never returns would wait


def _config(policy: dict[str, Any]) -> Any:
    raw = tomllib.loads(BENCH_CONFIG.read_text())
    raw["providers"][0]["base_url"] = "http://127.0.0.1:9/v1"
    raw["server"]["access_log"] = False
    raw["policies"] = {"test": {"max_attempts": 1, "first_byte_keepalive_s": 0, **policy}}
    raw["models"][0]["policy"] = "test"
    return parse_config(raw, source=str(BENCH_CONFIG))


def _pending_timers(loop: asyncio.AbstractEventLoop) -> int:
    # The loop's live timers, and the alarms pending on its one alarm timer (``gateway.relay.alarms``): that timer
    # itself, left armed with nothing pending, fires and runs nothing.
    return timers_left(loop)


async def _serve(
    policy: dict[str, Any],
    chunks: list[bytes],
    hang: bool,
    *,
    stop_reading_after: int = 0,
    hang_up_at: float = 0.0,
    waits: bool = False,
) -> dict[str, Any]:
    app = create_app(_config(policy))
    outcomes: list[str] = []
    async with app.router.lifespan_context(app):
        runtime = runtime_of({"app": app})
        upstream = Upstream(chunks, hang, waits)
        for name in list(runtime.upstreams.clients):
            await runtime.upstreams.clients[name].aclose()
            runtime.upstreams.clients[name] = upstream  # type: ignore[assignment]
        original = runtime.dispatcher.runner.record

        def record(request: Any, attempt: Any, outcome: Any, *args: Any, **kwargs: Any) -> Any:
            outcomes.append(outcome)
            return original(request, attempt, outcome, *args, **kwargs)

        runtime.dispatcher.runner.record = record  # type: ignore[method-assign]
        driver = Driver(app, stream=True)
        loop = asyncio.get_running_loop()
        messages: list[dict[str, Any]] = []
        hung_up = asyncio.Event()
        if hang_up_at:
            loop.call_later(hang_up_at, hung_up.set)
        body_read = False

        async def receive() -> dict[str, Any]:
            nonlocal body_read
            if not body_read:
                body_read = True
                return {"type": "http.request", "body": driver.body, "more_body": False}
            await hung_up.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)
            bodies = sum(1 for m in messages if m["type"] == "http.response.body")
            if stop_reading_after and bodies > stop_reading_after:
                await asyncio.Event().wait()
            if not message.get("more_body", True):
                hung_up.set()  # the server reports a completed response as a disconnect

        task = asyncio.ensure_future(driver.endpoint(dict(driver.scope), receive, send))
        started = time.monotonic()
        try:
            await task
            ended = "returned"
        except BaseException as exc:  # noqa: BLE001 - how the task ended is what is compared
            ended = type(exc).__name__
        took = time.monotonic() - started
        hung_up.set()
        await asyncio.sleep(0.01)
        timers = _pending_timers(loop)
    starts = [m for m in messages if m["type"] == "http.response.start"]
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return {
        "status": starts[0]["status"] if starts else None,
        "body": _shape(body),
        "ends": [m.get("more_body", False) for m in messages if m["type"] == "http.response.body"][-1:],
        "outcomes": outcomes,
        "ended": ended,
        "took": round(took, 1),
        "timers": timers,
        "cancelling": task.cancelling(),
    }


def _shape(body: bytes) -> Any:
    """The body without its per-request ids."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        parsed["error"].pop("request_id", None)
    return parsed


@pytest.fixture
def with_scope(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def use(scope: Any) -> None:
        monkeypatch.setattr(runner, "Deadline", scope)
        monkeypatch.setattr(replies, "Deadline", scope)

    yield use


def _both(with_scope: Any, caplog: pytest.LogCaptureFixture, *args: Any, **kwargs: Any) -> list[Any]:
    results = []
    for scope in (AsyncioTimeout, Deadline):
        with_scope(scope)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gateway"):
            result = asyncio.run(_serve(*args, **kwargs))
        result["logged"] = [r.getMessage().split(": ", 1)[-1] for r in caplog.records if r.name == "gateway"]
        results.append(result)
    # How long each took is the loaded machine's as much as the deadline's: the two must agree within a scheduling
    # slip (0.3 s), then read as one; which deadline fired is pinned by the status, outcomes and log lines.
    took = [result.pop("took") for result in results]
    assert abs(took[0] - took[1]) <= 0.3, took
    for result in results:
        result["took"] = took[0]
    return results


def test_no_first_token_in_time_is_the_same_504(with_scope: Any, caplog: pytest.LogCaptureFixture) -> None:
    old, new = _both(with_scope, caplog, {"first_token_timeout_s": 0.2}, [], True)
    assert new == old, (old, new)
    assert old["status"] == 504 and old["outcomes"] == ["timeout"] and old["ended"] == "returned"


def test_a_client_that_stops_reading_is_cut_the_same(with_scope: Any, caplog: pytest.LogCaptureFixture) -> None:
    old, new = _both(with_scope, caplog, {"total_timeout_s": 0.2}, stream_chunks(), False, stop_reading_after=3)
    assert new == old, (old, new)
    assert old["outcomes"] == ["client_cancelled"] and old["ended"] == "returned"
    assert any("stopped reading" in line for line in old["logged"])


def test_a_stream_without_done_ends_after_the_linger_the_same(
    with_scope: Any, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = _both(with_scope, caplog, {}, stream_chunks()[:-1], True)
    assert new == old, (old, new)
    assert old["outcomes"] == ["ok"] and old["ends"] == [False] and old["took"] >= replies.FINISH_LINGER_S


def test_a_hang_up_inside_a_deadline_is_a_cancel_not_a_timeout(
    with_scope: Any, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = _both(with_scope, caplog, {"first_token_timeout_s": 5.0}, [], True, hang_up_at=0.1)
    assert new == old, (old, new)
    assert old["outcomes"] == ["client_cancelled"] and old["ended"] == "returned" and old["cancelling"] == 0


def test_the_wait_for_the_rest_is_timed_only_when_a_read_would_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the finish, a read whose bytes are in is taken without a deadline (it cannot outlast one); one that
    would wait gets its deadline as before. The client and the attempt see the same either way."""
    made: list[float] = []

    class Counted(Deadline):
        __slots__ = ()

        def __init__(self, delay: float) -> None:
            made.append(delay)
            super().__init__(delay)

    monkeypatch.setattr(replies, "Deadline", Counted)
    results = []
    for waits in (True, False):
        made.clear()
        result = asyncio.run(_serve({}, stream_chunks(), False, waits=waits))
        result["lingers"] = made.count(replies.FINISH_LINGER_S)
        results.append(result)
    waited, ready = results
    assert waited["lingers"] == 2 and ready["lingers"] == 0  # the usage chunk and [DONE], after the finish
    del waited["lingers"], ready["lingers"], waited["took"], ready["took"]
    assert waited == ready
    assert ready["outcomes"] == ["ok"] and ready["ends"] == [False] and ready["status"] == 200
