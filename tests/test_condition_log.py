"""Warnings about lasting states are said once per change and once more on recovery: ``ConditionLog`` alone, a
deployment's limit at its floor in ``CapacityBoard``, and a flaky provider behind the real gateway, as the demo's
``bargain`` is, whose repeated 503s once gave a warning every few seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from gateway.conditions import ConditionLog
from gateway.config import ProviderConfig
from gateway.fakes import FakeBehavior
from gateway.routing.capacity import BACKOFF_FLOOR, QUIET_S, CapacityBoard
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.test_capacity import BODY, burst

FLOOR = "concurrency limit backed off to its floor"


def said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if words in r.getMessage()]


def test_a_state_is_said_when_it_starts_or_changes_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    log: ConditionLog[str] = ConditionLog(logging.getLogger("gateway.test"))
    with caplog.at_level(logging.INFO, logger="gateway.test"):
        assert log.holds("a", "down", "a is down (%s)", "refused")
        assert not log.holds("a", "down", "a is down (%s)", "refused again")  # the same state: quiet
        assert log.holds("b", "down", "b is down")  # another key: its own state
        assert log.holds("a", "slow", "a is slow")  # a new state of the same key
        assert log.ended("a", "a is back") and not log.ended("a", "a is back")
        assert not log.ended("c", "c is back")  # never said: nothing to end
        assert log.holds("a", "slow", "a is slow")  # after its end, the state is news again
    assert [f"{r.levelname} {r.getMessage()}" for r in caplog.records] == [
        "WARNING a is down (refused)", "WARNING b is down", "WARNING a is slow", "WARNING a is back",
        "WARNING a is slow",
    ]  # fmt: skip
    assert log.active("a") and log.active("b") and not log.active("c")
    errors: ConditionLog[str] = ConditionLog(logging.getLogger("gateway.test"), logging.ERROR)
    with caplog.at_level(logging.INFO, logger="gateway.test"):
        errors.holds("t", "KeyError", "t failed")
        errors.ended("t", "t working again")
    assert [r.levelname for r in caplog.records[-2:]] == ["ERROR", "WARNING"]  # a recovery is no error


def _refuse(board: CapacityBoard, provider: ProviderConfig, now: float, in_flight: int = 4) -> None:
    board.observe(provider, ("m", "p"), ok=False, status=503, in_flight=in_flight, limits=None, retry_after_s=None,
                  sent_at=now, now=now)  # fmt: skip


def _answer(board: CapacityBoard, provider: ProviderConfig, now: float, in_flight: int) -> None:
    board.observe(provider, ("m", "p"), ok=True, status=200, in_flight=in_flight, limits=None, retry_after_s=None,
                  sent_at=now, now=now)  # fmt: skip


def test_a_limit_that_hovers_at_its_floor_is_said_once_and_its_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    provider = ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1")
    board = CapacityBoard()
    now = 0.0
    with caplog.at_level(logging.INFO, logger="gateway"):
        for _ in range(5):  # refused at the floor, grown a little above it by answers at load, refused again
            now += 10.0
            _refuse(board, provider, now)
            for _ in range(3):
                now += 1.0
                _answer(board, provider, now, in_flight=4)
            assert board.limits[("m", "p")].limit > 4.0  # above the floor again: each refusal reaches it anew
        assert said(caplog, FLOOR) == ["WARNING deployment p of model m: " + FLOOR + " (4) after a 503"]
        while board.limits[("m", "p")].limit < 2 * BACKOFF_FLOOR:  # answers at load grow it back
            now += 0.1
            _answer(board, provider, now, in_flight=8)
        assert said(caplog, "recovered") == ["WARNING deployment p of model m: concurrency limit recovered (now 8)"]
        _refuse(board, provider, now + 1.0, in_flight=5)
        assert len(said(caplog, FLOOR)) == 2  # after a recovery, the floor is news again
        # A provider refused at the floor that then answers, with no load to grow its limit by, for QUIET_S.
        _answer(board, provider, now + 1.0 + QUIET_S / 2, in_flight=1)
        assert len(said(caplog, "recovered")) == 1
        _answer(board, provider, now + 1.0 + QUIET_S, in_flight=1)
        assert len(said(caplog, "recovered")) == 2


def test_a_flaky_provider_under_load_is_warned_about_once(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's ``bargain``: 503s on a share of requests, at a few requests in flight, over and over."""
    caplog.set_level(logging.WARNING, logger="gateway")
    flaky = fakes.start("flaky", FakeBehavior(status=503, error_rate=0.25, seed=3, ttft_s=0.02, output_tokens=4))
    steady = fakes.start("steady", FakeBehavior(ttft_s=0.02, output_tokens=4), record=False)
    gateway = start_gateway(gateway_config([flaky, steady], max_concurrency=None, policy={"failure_threshold": 1000}))
    results = asyncio.run(burst(gateway.url, clients=6, each=25, body=BODY))
    assert {status for status, _ in results} == {200}  # every refusal was answered by the next deployment
    state = flaky.app.state
    assert state.requests - state.completed >= 5  # refused again and again, with answers at load in between
    assert len(said(caplog, FLOOR)) == 1, said(caplog, FLOOR)
