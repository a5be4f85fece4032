"""A reload that fails, whatever the reason, changes nothing: the old config stays whole (metrics included), the
failure is said once in words (the log for SIGHUP, a JSON error for ``POST /v1/gateway/reload``), and the next
reload works."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from gateway.reload import Reloader
from gateway.runtime import GatewayRuntime
from tests.support.fakes import Fakes
from tests.support.wait import wait_until
from tests.test_reload import Serve, Served, config_text
from tests.test_reload import serve as serve  # the fixture: a gateway on a config file, reloadable


def _reloader(served: Served) -> Reloader:
    reloader = served.app.state.reloader
    assert isinstance(reloader, Reloader)
    return reloader


def _break_builds(reloader: Reloader) -> None:
    """Make the next builds fail as a bug would: no real part of a valid config still does (every known
    cause is a ``ConfigError`` now), so the build is the one seam left to inject it at."""
    real = reloader.build

    async def failing(config: GatewayConfig, previous: GatewayRuntime) -> GatewayRuntime:
        if config.models[0].name == "broken":
            raise RuntimeError("the build fell over")
        return await real(config, previous)

    reloader.build = failing


def test_an_unexpected_failure_answers_json_and_keeps_the_old_config(
    fakes: Fakes, serve: Serve, tmp_path: Path
) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b, first="a"))
    before = served.runtime
    _break_builds(_reloader(served))
    path = tmp_path / "gateway.toml"
    path.write_text(config_text(a, b, first="b").replace('name = "m"', 'name = "broken"'))
    reply = served.reload()
    assert reply.status_code == 500
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()["error"]
    assert error["code"] == "reload_failed" and error["type"] == "server_error"
    assert error["message"] == (
        "config not reloaded, the previous one keeps serving: RuntimeError: the build fell over"
    )
    assert "Traceback" not in reply.text
    assert served.runtime is before and served.chat().headers["x-gateway-provider"] == "a"
    path.write_text(config_text(a, b, first="b"))
    assert served.reload().status_code == 200  # the lock was let go
    assert served.chat().headers["x-gateway-provider"] == "b"


def test_sighup_says_an_unexpected_failure_once_and_the_next_sighup_works(
    fakes: Fakes, serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b, first="a"))
    before = served.runtime
    reloader = _reloader(served)
    _break_builds(reloader)
    loop = served.server.loop
    assert loop is not None
    path = tmp_path / "gateway.toml"
    path.write_text(config_text(a, b, first="b").replace('name = "m"', 'name = "broken"'))
    with caplog.at_level(logging.INFO, logger="gateway"):
        loop.call_soon_threadsafe(reloader.reload_in_background)  # what the SIGHUP handler calls
        wait_until(lambda: any("config reload" in r.getMessage() for r in caplog.records), what="the reload said")
        wait_until(lambda: not reloader._signalled, what="the reload task done")
        said = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage() for r in said] == [
            "config reload failed, the previous config keeps serving: RuntimeError: the build fell over"
        ]
        assert said[0].exc_info is None  # in words, no traceback
        assert served.runtime is before and served.chat().headers["x-gateway-provider"] == "a"
        caplog.clear()
        path.write_text(config_text(a, b, first="b"))
        loop.call_soon_threadsafe(reloader.reload_in_background)
        wait_until(lambda: served.runtime is not before, what="the second SIGHUP's reload")
    assert served.chat().headers["x-gateway-provider"] == "b"


def test_a_refused_reload_leaves_the_metrics_as_the_old_config_made_them(
    fakes: Fakes, serve: Serve, tmp_path: Path
) -> None:
    # The build is refused late (the metrics key's variable is unset): the series of the model it would have
    # added must not appear, nor the key names an open /metrics never shows.
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b))
    before = served.runtime
    added = '[[models]]\nname = "added"\n  [[models.deployments]]\n  provider = "a"\n  model = "x"\n'
    text = '[server]\nmetrics_key_env = "UNSET_METRICS_KEY"\n\n' + config_text(a, b, extra=added)
    (tmp_path / "gateway.toml").write_text(text)
    reply = served.reload()
    assert reply.status_code == 400 and "UNSET_METRICS_KEY is not set" in reply.json()["error"]["message"]
    assert served.runtime is before
    metrics = served.http.get("/metrics")
    assert metrics.status_code == 200
    assert 'model="added"' not in metrics.text
    assert not served.app.state.metrics.spend.named


def test_numbers_toml_reads_but_no_setting_takes_are_refused_in_words(
    fakes: Fakes, serve: Serve, tmp_path: Path
) -> None:
    # tomllib reads nan, inf and integers of any length; a 400-digit price raised OverflowError (a 500, and a
    # SIGHUP's reload task died with it), and nan was taken as a price.
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b))
    before = served.runtime
    path = tmp_path / "gateway.toml"
    deployment = '  model = "a-upstream"\n'
    for value, said in (("1" + "0" * 400, "100000000000… (401 digits)"), ("nan", "nan"), ("-inf", "-inf")):
        path.write_text(config_text(a, b).replace(deployment, f"{deployment}  price_out = {value}\n", 1))
        reply = served.reload()
        assert reply.status_code == 400, reply.text
        message = reply.json()["error"]["message"]
        assert f"models[0].deployments[0].price_out: expected a finite number, got {said}" in message
    path.write_text(config_text(a, b).replace("slice_s = 1", "slice_s = 1\nbuffer_limit = 1" + "0" * 30))
    message = served.reload().json()["error"]["message"]
    assert "expected a 64-bit integer" in message
    path.write_text(config_text(a, b) + "\n[x]\ndeep = " + "[" * 5000 + "]" * 5000 + "\n")
    reply = served.reload()
    assert reply.status_code == 400 and "nested too deeply" in reply.json()["error"]["message"]
    assert served.runtime is before
