"""A real Prometheus accepts the gateway's metrics, and every panel of the shipped Grafana dashboard
has data on a healthy gateway.

Three levels: ``promtool check metrics`` lints a scrape taken after real traffic (streams, whole
answers, failures and fallbacks, so that histograms, counters and window gauges all exist);
every selector of every panel matches a series of that scrape (fast, and names the selector
that would show *No data*); and a real Prometheus scrapes a gateway under traffic while every
panel's query is evaluated the way Grafana sends it (``$model``/``$provider`` = All).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.fakes import FakeBehavior
from tests.prometheus import SCRAPE_INTERVAL_S, binary, check_metrics, prometheus_scraping
from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "gateway.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
RATE_WINDOW = "3s"
"""Stands in for Grafana's ``$__rate_interval``, which is at least four scrape intervals."""
ALL = ".*"
"""What Grafana puts in ``$model`` and ``$provider`` when "All" is selected (the variables' allValue)."""

Labels = dict[str, str]


def grafana_expr(expr: str) -> str:
    """A panel's query as Grafana sends it to Prometheus, with "All" selected."""
    return (
        expr.replace("$__rate_interval", RATE_WINDOW).replace("$model", ALL).replace("$provider", ALL)
    )  # fmt: skip


def panel_queries() -> Iterator[tuple[str, str]]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            yield f"{panel['title']} [{target.get('refId', '?')}]", target["expr"]


def _start(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> Gateway:
    good = fakes.start("good", FakeBehavior(ttft_s=0.005, tokens_per_s=2000, output_tokens=16))
    flaky = fakes.start("flaky", FakeBehavior(status=503, error_rate=0.5, seed=3, output_tokens=16))
    # "flaky" first and a circuit that stays closed: half the requests fail there and fall back.
    return start_gateway(gateway_config([flaky, good], policy={"failure_threshold": 1000}))


def _send(gateway: Gateway, count: int) -> None:
    client = sdk(gateway.base_url, api_key="unused")
    for i in range(count):
        messages: Any = [{"role": "user", "content": f"question {i}"}]
        if i % 3 == 0:
            assert client.chat.completions.create(model="m", messages=messages, max_tokens=16).choices
        else:
            stream = client.chat.completions.create(model="m", messages=messages, stream=True, max_tokens=16)
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def _scrape(gateway: Gateway) -> str:
    response = httpx.get(gateway.url + "/metrics")
    assert response.status_code == 200
    return response.text


def test_promtool_accepts_a_scrape_taken_after_real_traffic(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    gateway = _start(fakes, start_gateway)
    _send(gateway, 9)
    wait_until(lambda: len(gateway.samples.samples) >= 9, what="samples recorded")
    text = _scrape(gateway)
    assert "gateway_window_ttft_seconds{" in text and "gateway_tokens_per_second_bucket{" in text
    assert "gateway_fallbacks_total{" in text
    result = check_metrics(text)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_what_it_should() -> None:
    # Not a vacuous pass: the old window gauge, with its reserved "quantile" label, is refused.
    bad = (
        "# HELP gateway_window_ttft_seconds TTFT quantile\n# TYPE gateway_window_ttft_seconds gauge\n"
        'gateway_window_ttft_seconds{model="m",quantile="0.95"} 0.5\n'
    )
    result = check_metrics(bad)
    assert result.returncode != 0 and 'should not have "quantile" label' in result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules() -> None:
    import subprocess

    result = subprocess.run(
        [binary("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _series(text: str) -> list[tuple[str, Labels]]:
    return [
        (sample.name, sample.labels) for family in text_string_to_metric_families(text) for sample in family.samples
    ]


def _matches(matcher: Any, labels: Labels, name: str) -> bool:
    value = name if matcher.name == "__name__" else labels.get(matcher.name, "")
    wanted: str = matcher.value
    op = matcher.op
    if op == promql_parser.MatchOp.Equal:
        return value == wanted
    if op == promql_parser.MatchOp.NotEqual:
        return value != wanted
    found = re.fullmatch(wanted, value) is not None
    return found if op == promql_parser.MatchOp.Re else not found


def _selectors(expr: str) -> list[Any]:
    found: list[Any] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_every_panel_selector_matches_a_series_of_a_gateway_that_has_served_nothing_yet(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    """Counters and gauges exist from start-up: only the histogram and window panels wait for traffic."""
    gateway = _start(fakes, start_gateway)
    idle = _series(_scrape(gateway))
    _send(gateway, 6)
    wait_until(lambda: len(gateway.samples.samples) >= 6, what="samples recorded")
    served = _series(_scrape(gateway))
    waits_for_traffic = ("_bucket", "gateway_window_", "gateway_overhead_seconds")
    checked = 0
    for where, expr in panel_queries():
        for selector in _selectors(grafana_expr(expr)):
            matchers = selector.matchers.matchers
            needs_traffic = any(part in selector.name for part in waits_for_traffic)
            series = served if needs_traffic else idle
            hits = [
                name
                for name, labels in series
                if name == selector.name and all(_matches(m, labels, name) for m in matchers)
            ]
            assert hits, f"{where}: {selector.name} matches no series ({'after traffic' if needs_traffic else 'idle'})"
            checked += 1
    assert checked >= 30


@pytest.fixture
def traffic() -> Iterator[Callable[[Gateway], threading.Thread]]:
    """Background requests to a gateway until the test ends (bounded: 2,000 requests or 60 s)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def start(gateway: Gateway) -> threading.Thread:
        def run() -> None:
            deadline = time.monotonic() + 60
            try:
                for _ in range(200):
                    if stop.is_set() or time.monotonic() > deadline:
                        return
                    _send(gateway, 10)
            except BaseException as exc:  # reported by the fixture's teardown
                errors.append(exc)

        thread = threading.Thread(target=run, name="traffic", daemon=True)
        thread.start()
        threads.append(thread)
        return thread

    yield start
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors


def test_every_dashboard_panel_has_data_in_a_real_prometheus(
    fakes: Fakes, start_gateway: Callable[..., Gateway], traffic: Callable[[Gateway], threading.Thread]
) -> None:
    gateway = _start(fakes, start_gateway)
    traffic(gateway)
    with prometheus_scraping(gateway.url.removeprefix("http://")) as prometheus:
        # A moment when every rate() window holds several successful scrapes taken under traffic.
        needed = math.ceil(float(RATE_WINDOW.rstrip("s")) / SCRAPE_INTERVAL_S) - 1
        deadline = time.monotonic() + 40
        while (at := prometheus.healthy_since(RATE_WINDOW, needed)) is None:
            assert time.monotonic() < deadline, f"no {needed} successful scrapes in {RATE_WINDOW} within 40 s"
            time.sleep(SCRAPE_INTERVAL_S / 2)
        for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
            if variable["type"] == "query":
                definition = variable["definition"]
                match = re.fullmatch(r"label_values\((.+), (\w+)\)", definition)
                assert match, definition
                listed = prometheus.label_values(match.group(2), grafana_expr(match.group(1)))
                assert listed, f"variable {variable['name']}: {definition} lists nothing"
        empty = []
        for where, expr in panel_queries():
            result = prometheus.query(grafana_expr(expr), at=at)
            values = [float(sample["value"][1]) for sample in result]
            if not any(not math.isnan(v) for v in values):
                empty.append(f"{where}: {expr} -> {result}")
        assert not empty, "panels with no data:\n" + "\n".join(empty)
