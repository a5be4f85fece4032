"""Background tasks that fail say so, in words, and the long-lived ones go on: the circuit prober after an
unexpected error in one tick, a reload's retiring of the old runtime when its close raises."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import httpx
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.relay.probe import CircuitProber
from gateway.relay.runner import AttemptRunner
from gateway.reload import Reloader
from gateway.runtime import GatewayRuntime
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import GatewayServers
from tests.support.servers import ServerThread
from tests.support.wait import wait_until
from tests.test_reload import Serve, config_text
from tests.test_reload import serve as serve  # the fixture: a gateway on a config file, reloadable

POLICY = {"extends": "fixed-order", "failure_threshold": 2, "cooldown_s": 0.2, "max_cooldown_s": 0.5}
SECRET = "sk-upstream-secret-0123456789"


def test_the_prober_goes_on_after_an_unexpected_error(
    fakes: Fakes, test_servers: list[ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    down = fakes.start("a", FakeBehavior(status=503))
    backup = fakes.start("b")
    app = create_app(gateway_config([down, backup], policy=POLICY), AppOptions(environ={}, probe_interval_s=None))
    gateway = GatewayServers(test_servers).serve(app)
    circuits = gateway.runtime.router.state.health.circuits
    while circuits.get(("m", "a")) is None or circuits[("m", "a")].state != "open":
        body = {"model": "m", "messages": MESSAGES}
        assert httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10).status_code == 200
    ticks = 0

    def current() -> AttemptRunner:
        # The prober's own seam (the app passes the current runtime's runner): the first ticks fall over.
        nonlocal ticks
        ticks += 1
        if ticks <= 3:
            raise RuntimeError("lookup fell over\nsecond line")
        return gateway.runtime.dispatcher.runner

    prober = CircuitProber(current, interval_s=0.02)
    asked = down.app.state.requests
    with caplog.at_level(logging.INFO, logger="gateway"):
        gateway.server.call(_start(prober))
        try:
            wait_until(lambda: down.app.state.requests > asked, timeout=5, what="a probe after the failed ticks")
            recovery = "circuit probes working again"
            wait_until(lambda: any(r.getMessage() == recovery for r in caplog.records), timeout=5, what=recovery)
        finally:
            gateway.server.call(prober.aclose())
    said = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in said] == [
        "circuit probes failed, trying again in 0.02s: RuntimeError: lookup fell over"
    ]  # once, not at each failed tick
    assert said[0].exc_info is None
    # ... and once more, at warning, when a tick worked again.
    recovered = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "again" in r.getMessage()]
    assert recovered == ["circuit probes working again"]


async def _start(prober: CircuitProber) -> None:
    prober.start()


@dataclasses.dataclass(frozen=True)
class ClosingBadly(GatewayRuntime):
    """A runtime whose close falls over after closing (the failure a reload's retiring must say)."""

    async def aclose(self) -> None:
        await super().aclose()
        raise OSError(f"close failed talking to upstream with key {SECRET[:3]}…")


def test_a_runtime_whose_close_raises_is_retired_with_a_line_in_the_log(
    fakes: Fakes, serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b, first="a"))
    reloader = served.app.state.reloader
    assert isinstance(reloader, Reloader)
    real = reloader.build

    async def build(config: GatewayConfig, previous: GatewayRuntime) -> GatewayRuntime:
        # The first reload's runtime closes badly (the seam: what the reloader builds), retired by the second.
        runtime = await real(config, previous)
        if reloader.reloads > 0:
            return runtime
        return ClosingBadly(**{f.name: getattr(runtime, f.name) for f in dataclasses.fields(runtime)})

    reloader.build = build
    path = tmp_path / "gateway.toml"
    path.write_text(config_text(a, b, first="b"))
    asyncio_records: list[logging.LogRecord] = []
    with caplog.at_level(logging.INFO):
        assert served.reload().status_code == 200  # its runtime closes badly when retired
        path.write_text(config_text(a, b, first="a"))
        assert served.reload().status_code == 200
        wait_until(
            lambda: any("previous config's runtime" in r.getMessage() for r in caplog.records),
            what="the retiring said",
        )
        asyncio_records = [r for r in caplog.records if r.name == "asyncio"]
    said = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "gateway"]
    assert [r.getMessage() for r in said] == [
        "closing the previous config's runtime failed: OSError: close failed talking to upstream with key sk-…"
    ]
    assert said[0].exc_info is None
    assert not asyncio_records  # no "Task exception was never retrieved"
    assert served.chat().headers["x-gateway-provider"] == "a"
