"""``GET /dashboard`` in headless Chromium, on a real gateway in front of three fake providers.

The gateway has client keys, so the browser goes the way a person would: ``/dashboard`` alone
is refused, ``/dashboard?key=…`` redirects to the bare page with a session cookie. The page is
loaded empty first (the intentional empty state), then after streamed traffic: the rows, the
scatter with its Pareto frontier, the routing choice, and at least one self-refresh by its
script (run under the page's Content-Security-Policy) must be in the DOM. Screenshots of both
states are written next to the test's temporary files.

Today's router tries deployments in config order; a request reaches the second or third
deployment only when the ones before it fail (each request's ``fake`` object makes them answer
503), so those failures show in their success rates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.fakes import FakeBehavior
from tests.chromium import devtools, dump_dom, screenshot
from tests.dashboard_screenshot import NARROW, WIDE, seeded_dashboard
from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

KEY = "dash-client-key"
# (TTFT, tokens/s): "early" starts first, "stream" streams fastest, "laggard" is beaten by
# "early" on both, so the frontier is {early, stream}, with margins of 3x or more on each axis.
PROFILES = {"early": (0.01, 250.0), "stream": (0.08, 800.0), "laggard": (0.12, 80.0)}
# Requests per deployment, and which deployments must fail before it for the request to land there.
TRAFFIC = {"early": (6, ()), "stream": (5, ("early",)), "laggard": (5, ("early", "stream"))}
"""Each deployment answers at least 5 times (``MIN_RANKED_ANSWERS``): ranked, so ordered and compared by speed."""


def _send_traffic(gateway: Gateway) -> int:
    client = sdk(gateway.base_url, api_key=KEY)
    attempts = 0
    for target, (count, failing) in TRAFFIC.items():
        fake: dict[str, Any] = {"servers": {name: {"status": 503} for name in failing}}
        for i in range(count):
            stream = client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": f"question {i}"}],
                stream=True,
                extra_body={"fake": fake},
            )
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
            assert text, f"no answer from {target}"
            attempts += len(failing) + 1
    return attempts


def _points(dom: str) -> dict[str, str]:
    """Deployment name → its scatter point's class ("on-frontier" or "dominated")."""
    return {
        name: kind
        for kind, name in re.findall(r'<g class="point ([a-z-]+)"[^>]*>.*?<text class="label"[^>]*>([^<]+)</text>', dom)
    }


def test_dashboard_in_chromium(fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path) -> None:
    servers = [
        fakes.start(name, FakeBehavior(ttft_s=ttft, tokens_per_s=speed, output_tokens=20))
        for name, (ttft, speed) in PROFILES.items()
    ]
    # Config order, and circuits that stay closed through the planned failures below.
    config = gateway_config(servers, policy={"failure_threshold": 100})
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    page = f"{gateway.url}/dashboard?key={KEY}"

    refused = dump_dom(f"{gateway.url}/dashboard")
    assert "The dashboard needs a client key" in refused and 'id="board"' not in refused

    empty = dump_dom(page)
    assert "No traffic measured yet" in empty and "gateway demo --traffic 5" in empty
    assert "Authorization: Bearer $GATEWAY_API_KEY" in empty  # keys are on: the example says so
    assert '<svg class="scatter"' not in empty
    screenshot(page, tmp_path / "dashboard-empty.png", height=720)

    attempts = _send_traffic(gateway)
    wait_until(lambda: len(gateway.samples.samples) >= attempts, what="every attempt recorded")

    # 4 s of the page's virtual time: its script re-fetches the board at least once.
    dom = dump_dom(page, wait_ms=4_000)
    assert "No traffic measured yet" not in dom
    refreshes = re.search(r'id="live"[^>]*data-refreshes="(\d+)"', dom)
    assert refreshes is not None and int(refreshes.group(1)) >= 1, "the page did not refresh itself"
    assert 'class="live"' in dom  # not marked stale

    rows = re.findall(
        r'<tr class="[^"]*" style="--c:#[0-9a-f]{6}"><td class="name">.*?<span class="dep">([^<]+)</span>', dom
    )
    assert rows == ["stream", "early", "laggard"]  # fastest median first
    # Failed attempts count too; a loaded machine may add a hedge or a look the traffic above did not plan.
    shown = re.search(r"(\d+) samples in 5 min", dom)
    assert shown is not None and attempts <= int(shown.group(1)) <= len(gateway.samples.samples)
    assert '<svg class="scatter"' in dom and "time to first token, p50" in dom
    assert _points(dom) == {"early": "on-frontier", "stream": "on-frontier", "laggard": "dominated"}
    assert dom.count('<polyline class="frontier-line"') == 1
    assert re.search(
        r'next request goes to <span class="chip"[^>]*>early</span><span class="basis"[^>]*>config order', dom
    )

    shot = screenshot(page, tmp_path / "dashboard.png", height=760)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_a_missing_chromium_fails_with_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AssertionError, match=r"apt-get install -y chromium"):
        dump_dom("http://127.0.0.1:9/dashboard")


LAYOUT = """JSON.stringify((() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const charts = [...document.querySelectorAll("svg.scatter")].map((svg) => ({
    svg: box(svg),
    points: [...svg.querySelectorAll("g.point")].map((g) => g.querySelector("title").textContent.split(":")[0]),
    labels: [...svg.querySelectorAll("text.label")].map((t) => [t.textContent, ...box(t)]),
    ticks: [...svg.querySelectorAll("text.tick")].map((t) => t.textContent),
  }));
  const why = [...document.querySelectorAll(".why")].map((w) => ({box: box(w), text: w.innerText}));
  const tables = [...document.querySelectorAll(".table-wrap")].map(box);
  const cards = [...document.querySelectorAll(".card")].map(box);
  const sparks = document.querySelectorAll("svg.spark").length;
  return {width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth, charts, why, tables, cards,
          sparks, text: document.body.innerText};
})())"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5


LAPTOP = (1280, 900)


@pytest.mark.parametrize(("width", "height"), [WIDE, LAPTOP, NARROW], ids=["wide", "laptop", "phone"])
def test_the_dashboard_lays_out_at_a_desktop_and_a_phone_width(width: int, height: int, tmp_path: Path) -> None:
    """The seeded page of ``tests.dashboard_screenshot``, measured where Chromium drew it."""
    with seeded_dashboard() as url, devtools() as browser:
        browser.open(url, width, height)
        layout = json.loads(browser.evaluate(LAYOUT))
        shot = browser.screenshot(tmp_path / f"dashboard-{width}.png")
    assert layout["width"] == width
    assert layout["scrollWidth"] <= width, "the page scrolls sideways"  # wide tables scroll inside their card
    assert len(layout["charts"]) == 2
    for chart in layout["charts"]:
        labelled = [label[0] for label in chart["labels"]]
        assert sorted(labelled) == sorted(chart["points"]), "every point keeps its label"
        for name, *label in chart["labels"]:
            svg = chart["svg"]
            assert svg[0] - 1 <= label[0] and label[2] <= svg[2] + 1, f"{name}'s label leaves the chart"
        boxes = [label[1:] for label in chart["labels"]]
        assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]), chart["labels"]
        assert any(tick.endswith(" ms") for tick in chart["ticks"])  # the log time axis: ms and s ticks
    assert len(layout["why"]) == 2
    for why in layout["why"]:
        assert why["box"][3] > why["box"][1] and "WHY THE NEXT REQUEST GOES WHERE IT GOES" in why["text"].upper()
        assert "Predicted time" in why["text"] and "CHEAPEST" in why["text"].upper()
    assert "–" not in layout["text"]  # "no samples" in words, never a dash
    assert layout["sparks"] == 9  # every deployment's half hour
    for chart, table, card in zip(layout["charts"], layout["tables"], layout["cards"], strict=True):
        svg = chart["svg"]
        assert svg[2] - svg[0] >= 300 or width < 640, "the chart is squeezed"
        if width >= 1400:  # beside the table, and the card uses the screen's width
            assert svg[0] >= table[2] - 1 and svg[1] < table[3], (svg, table)
            assert card[2] - card[0] >= 0.9 * width - 60, card
        else:  # under it
            assert svg[1] >= table[3] - 1, (svg, table)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == width
    assert shot.stat().st_size > 50_000  # a drawn page, not a blank one
