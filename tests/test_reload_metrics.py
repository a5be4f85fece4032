"""What ``/metrics`` says after a reload: the gauges of providers and models the reload removed go (at once, or
once the work still on them drains), those that remain keep their values, and the counters of both stay."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.fakes import FakeBehavior
from tests.support.fakes import Fakes, FakeServer
from tests.support.streams import stream_in_background
from tests.support.wait import wait_until
from tests.test_reload import ADMIN, Serve, Served
from tests.test_reload import serve as serve  # the fixture: a gateway on a config file, reloadable

_GAUGES_OF_PROVIDER = (
    "gateway_circuit_state",
    "gateway_inflight_requests",
    "gateway_provider_max_concurrency",
    "gateway_provider_concurrency_limit",
    "gateway_provider_ratelimit_reset_seconds",
)


def _config(a: FakeServer, b: FakeServer | None) -> str:
    """Models ``m`` (on a, and b) and ``gone`` (on b alone); without ``b``, neither b nor ``gone``."""
    text = (
        "[stats]\nwindow_s = 60\nslice_s = 1\n\n[policies.fixed-order]\nfailure_threshold = 1\n\n"
        f'[[providers]]\nname = "a"\nbase_url = "{a.base_url}"\nmax_concurrency = 7\n\n'
    )
    if b is not None:
        text += f'[[providers]]\nname = "b"\nbase_url = "{b.base_url}"\nmax_concurrency = 9\n\n'
    text += '[[models]]\nname = "m"\npolicy = "fixed-order"\n'
    text += '  [[models.deployments]]\n  provider = "a"\n  model = "a-upstream"\n'
    if b is not None:
        text += '  [[models.deployments]]\n  provider = "b"\n  model = "b-upstream"\n'
        text += '\n[[models]]\nname = "gone"\npolicy = "fixed-order"\n'
        text += '  [[models.deployments]]\n  provider = "b"\n  model = "b-upstream"\n'
    return text


def _lines(served: Served) -> list[str]:
    reply = served.http.get("/metrics")
    assert reply.status_code == 200
    return [line for line in reply.text.splitlines() if not line.startswith("#")]


def _of_b(lines: list[str]) -> list[str]:
    """The gauge lines that name provider b or model ``gone``."""
    gauges = (*_GAUGES_OF_PROVIDER, "gateway_queue_depth", "gateway_window_")
    return [line for line in lines if line.startswith(gauges) and ('provider="b"' in line or 'model="gone"' in line)]


def _value(lines: list[str], prefix: str) -> float:
    found = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix + " ")]
    assert len(found) == 1, (prefix, found)
    return found[0]


def _chat(served: Served, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return served.http.post("/v1/chat/completions", json=body)


def test_a_reload_removes_the_gauges_of_what_it_removed(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    a = fakes.start("a")
    b = fakes.start("b", FakeBehavior(status=500))
    served = serve(_config(a, b))
    assert _chat(served, "m").headers["x-gateway-provider"] == "a"
    assert _chat(served, "gone").status_code >= 500  # b fails: its circuit opens (failure_threshold = 1)
    before = _lines(served)
    assert _value(before, 'gateway_circuit_state{provider="b",state="open"}') == 1
    assert _value(before, 'gateway_provider_max_concurrency{provider="b"}') == 9
    assert any(line.startswith("gateway_window_samples") and 'provider="b"' in line for line in before)
    (tmp_path / "gateway.toml").write_text(_config(a, None))
    assert served.reload().status_code == 200
    after = _lines(served)
    assert _of_b(after) == []
    # What remains keeps its values; the counters of what went stay (a counter never vanishes mid-life).
    assert _value(after, 'gateway_circuit_state{provider="a",state="closed"}') == 1
    assert _value(after, 'gateway_provider_max_concurrency{provider="a"}') == 7
    assert _value(after, 'gateway_window_samples{deployment="a",model="m",provider="a"}') == 1
    assert _value(after, 'gateway_upstream_requests_total{model="gone",outcome="upstream_error",provider="b"}') >= 1
    assert _chat(served, "m").status_code == 200
    assert _of_b(_lines(served)) == []


def test_a_stream_in_flight_on_a_removed_provider_drains_its_gauge_and_brings_nothing_back(
    fakes: Fakes, serve: Serve, tmp_path: Path
) -> None:
    a = fakes.start("a")
    b = fakes.start("b", FakeBehavior(ttft_s=0.01, tokens_per_s=20, output_tokens=12))
    served = serve(_config(a, b))
    old = served.runtime
    thread, result = stream_in_background(served.server.url, "gone")
    wait_until(lambda: old.requests.count == 1 and b.app.state.open_streams == 1)
    (tmp_path / "gateway.toml").write_text(_config(a, None))
    assert served.reload().status_code == 200
    during = _lines(served)
    assert _value(during, 'gateway_inflight_requests{provider="b"}') == 1  # still true: it drains
    assert [line for line in _of_b(during) if not line.startswith("gateway_inflight_requests")] == []
    thread.join(10)
    assert result["provider"] == "b" and result["body"].rstrip().endswith("data: [DONE]")  # its own config
    wait_until(lambda: old.requests.count == 0)
    assert _of_b(_lines(served)) == []
    assert _value(_lines(served), 'gateway_upstream_requests_total{model="gone",outcome="ok",provider="b"}') == 1


def test_a_reload_that_opens_metrics_takes_the_key_names_off_them(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    # Key and team names are shown only behind the metrics key; a reload that drops metrics_key_env opens /metrics,
    # and the spend series booked under the names must not be shown on it.
    a = fakes.start("a")
    (tmp_path / "keys.toml").write_text(
        '[[keys]]\nname = "alice"\nkey = "sk-alice-0123456789"\nteam = "search"\nbudget_usd = 100\n'
    )
    auth = '[auth]\napi_keys_file = "keys.toml"\n\n'
    named = '[server]\nmetrics_key_env = "METRICS_KEY"\n\n' + auth + _config(a, None)
    served = serve(named, environ={"GATEWAY_ADMIN_KEY": ADMIN, "METRICS_KEY": "metrics-key"})
    key = {"authorization": "Bearer sk-alice-0123456789"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert served.http.post("/v1/chat/completions", json=body, headers=key).status_code == 200
    behind = {"authorization": "Bearer metrics-key"}
    wait_until(lambda: 'key="alice"' in served.http.get("/metrics", headers=behind).text)  # booked at settlement
    shown = served.http.get("/metrics", headers=behind).text
    assert 'name="alice"' in shown  # its budget, behind the key
    (tmp_path / "gateway.toml").write_text(auth + _config(a, None))
    assert served.reload().status_code == 200
    assert served.http.post("/v1/chat/completions", json=body, headers=key).status_code == 200
    wait_until(lambda: served.runtime.requests.count == 0)
    opened = served.http.get("/metrics")
    assert opened.status_code == 200
    assert "alice" not in opened.text and "search" not in opened.text
    assert 'gateway_spend_usd_total{key="",model="m",provider="a",team=""}' in opened.text


def test_an_attempt_started_on_a_removed_provider_is_counted_until_it_ends(
    fakes: Fakes, serve: Serve, tmp_path: Path
) -> None:
    """A request of the old runtime asks b again after b's reload removed it (its 503's Retry-After), and a reload
    brings b back before that stream ends: the gauge counts the stream from its start to its end, never below 0."""
    a = fakes.start("a")
    b = fakes.start("b", FakeBehavior(status=503, fail_first=1, retry_after="1", tokens_per_s=10, output_tokens=20))
    served = serve(_config(a, b))
    old = served.runtime
    thread, result = stream_in_background(served.server.url, "gone")
    wait_until(lambda: b.app.state.requests == 1 and old.router.in_flight("gone", "b") == 0)  # refused: waits 1 s
    (tmp_path / "gateway.toml").write_text(_config(a, None))
    assert served.reload().status_code == 200
    assert _of_b(_lines(served)) == []  # nothing in flight on b: its gauge went at once
    wait_until(lambda: b.app.state.open_streams == 1)  # the old runtime's retry, on the b it still has
    assert _value(_lines(served), 'gateway_inflight_requests{provider="b"}') == 1
    (tmp_path / "gateway.toml").write_text(_config(a, b))
    assert served.reload().status_code == 200
    assert _value(_lines(served), 'gateway_inflight_requests{provider="b"}') == 1
    thread.join(10)
    assert result["provider"] == "b" and result["body"].rstrip().endswith("data: [DONE]")
    wait_until(lambda: old.requests.count == 0)
    assert _value(_lines(served), 'gateway_inflight_requests{provider="b"}') == 0
    assert served.runtime.router.in_flight("gone", "b") == 0
