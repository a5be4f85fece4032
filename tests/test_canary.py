"""The canary: built-in tasks per deployment on a schedule, judged and recorded like relayed answers, within a
daily token budget."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gateway.canary import Canary
from gateway.config import ConfigError
from gateway.fakes import FakeBehavior
from gateway.samples import SampleLog
from gateway.tokens import load_token_counter
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]


def test_a_gateway_with_a_canary_judges_each_deployment_with_no_user_traffic(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    good = fakes.start("good", FakeBehavior(output_tokens=6))
    broken = fakes.start("broken", FakeBehavior(output_tokens=6, empty_rate=1.0, seed=1))
    canary = {"interval_s": 0.2, "daily_tokens": 100_000}
    gateway = start_gateway(gateway_config([good, broken], extra={"canary": canary}))
    samples = gateway.samples.samples
    wait_until(lambda: {s.deployment for s in samples} >= {"good", "broken"}, what="a canary round")
    verdicts = {s.deployment: (s.kind, s.validity, s.outcome) for s in samples}
    assert verdicts == {"good": ("plain", "valid", "ok"), "broken": ("plain", "empty", "ok")}
    summary = gateway.runtime.stats.snapshot().get("m", "broken")
    assert summary is not None and summary.top_reason("plain") == "empty"
    assert good.app.state.recorded[0].body is not None and good.app.state.recorded[0].body["temperature"] == 0


def test_the_daily_budget_skips_rounds_until_the_next_day(fakes: Fakes) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=6))
    now = [1_800_000_000.0]
    budget = {"interval_s": 600, "daily_tokens": 120}
    config = gateway_config([fake], extra={"canary": budget})
    log = SampleLog()
    counter = load_token_counter("o200k_base")
    canary = Canary(lambda: config, lambda: log, lambda: counter, {}, wall_clock=lambda: now[0])

    async def rounds(n: int) -> None:
        for _ in range(n):
            await canary.round()

    asyncio.run(rounds(3))
    assert len(log.samples) == 1 and canary.counts["skipped"] == 2  # one round's tokens, then none left
    assert 0 < canary.spent <= 120
    now[0] += 86_400
    asyncio.run(rounds(1))
    assert len(log.samples) == 2 and canary.spent <= 120


def test_canary_config_keys() -> None:
    config = gateway_config(["a"], extra={"canary": {}})
    assert config.canary is not None and (config.canary.interval_s, config.canary.daily_tokens) == (600.0, 200_000)
    assert gateway_config(["a"]).canary is None
    with pytest.raises(ConfigError, match="canary"):
        gateway_config(["a"], extra={"canary": {"interval": 5}})
    with pytest.raises(ConfigError, match="interval_s"):
        gateway_config(["a"], extra={"canary": {"interval_s": 0}})
