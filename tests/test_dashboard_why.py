"""The dashboard's "why": the router's own ranking for a typical request, shown with its trade-off.

The numbers must be the router's (its ``rank``, from the beliefs that plan requests, which
``GET /v1/gateway/routes`` explains), never a second estimate: the tests compare them.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.config import GatewayConfig, parse_config
from gateway.dashboard.page import render_page
from gateway.dashboard.text import money, seconds
from gateway.dashboard.view import DashboardView, RoutingChoice, model_boards
from gateway.dashboard.why import Predicted, WhyView, render_why, why_sentence, why_view
from gateway.fakes import FakeBehavior
from gateway.leaderboard import leaderboard
from gateway.routing import RouteRequest
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore, StatsSnapshot, StoreHealth
from tests.support.clients import sdk
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until
from tests.test_dashboard_page import NONCE, assert_inert
from tests.test_dashboard_view import sample

# (TTFT s, tokens/s, $/1M in, $/1M out): quick and dear, slow and cheap, in between.
FIGURES = {"quick": (0.2, 300.0, 3.0, 9.0), "cheap": (1.5, 40.0, 0.1, 0.2), "middle": (0.5, 150.0, 0.6, 1.8)}


def _config(policy: str = "balanced") -> GatewayConfig:
    return parse_config(
        {
            "providers": [{"name": n, "base_url": f"http://127.0.0.1:9/{n}/v1"} for n in FIGURES],
            "models": [
                {
                    "name": "m",
                    "policy": policy,
                    "deployments": [
                        {"provider": n, "model": n, "price_in": f[2], "price_out": f[3]} for n, f in FIGURES.items()
                    ],
                }
            ],
        },
        source="test.toml",
    )


def _measured() -> list[Sample]:
    return [sample(n, f[0], f[1]) for n, f in FIGURES.items() for _ in range(40)]


def _router(config: GatewayConfig, samples: list[Sample]) -> tuple[LiveBeliefRouter, StatsSnapshot]:
    """A router whose beliefs heard ``samples`` (another replica's answers, in the shared log), and the snapshot."""
    clock = FakeClock()
    store = InMemoryStatsStore(config.stats, wall_clock=clock)
    other = store.as_replica("other")
    for answer in samples:
        other.record(answer)
    router = LiveBeliefRouter(config, store, rng=random.Random(1), clock=clock)
    router.plan(RouteRequest(config.models[0], "chat", False, 500, None))  # hears the log
    return router, store.snapshot()


def test_the_why_is_the_routers_own_ranking_for_a_typical_request() -> None:
    config = _config()
    router, _ = _router(config, _measured())
    ranking = router.rank(config.models[0])
    why = why_view(ranking)
    assert [r.deployment for r in why.rows] == [r.deployment.name for r in ranking.rows]
    for shown, ranked in zip(why.rows, ranking.rows, strict=True):  # the same numbers, not re-computed
        assert shown.time_s == ranked.scored.prediction.time_s and shown.cost_usd == ranked.scored.prediction.cost_usd
    assert (why.prompt_tokens, why.output_tokens) == (ranking.shape.prompt_tokens, ranking.shape.output_tokens)
    assert why.cheapest == "cheap" and why.fastest == "quick"
    sentence = why_sentence(why)
    first = why.rows[0]
    assert sentence.startswith(f"{first.deployment}: {seconds(first.time_s)} and {money(first.cost_usd)}")
    assert "cheap is cheapest" in sentence  # what the leader gives up, by name


def test_a_leader_that_wins_both_says_so_and_a_fixed_policy_says_it_ignores_the_figures() -> None:
    both = {"quick": (0.2, 300.0), "cheap": (1.5, 40.0), "middle": (0.5, 150.0)}
    samples = [sample(n, t, v) for n, (t, v) in both.items() for _ in range(40)]
    cheap_and_fast = parse_config(
        {
            "providers": [{"name": n, "base_url": f"http://127.0.0.1:9/{n}/v1"} for n in both],
            "models": [
                {"name": "m", "deployments": [{"provider": n, "model": n, "price_in": 1.0, "price_out": 1.0}
                                               for n in both]}
            ],
        },
        source="t.toml",
    )  # fmt: skip
    router, _ = _router(cheap_and_fast, samples)
    why = why_view(router.rank(cheap_and_fast.models[0]))
    assert why.rows[0].deployment == "quick" and "— fastest and cheapest." in why_sentence(why)

    fixed = _config(policy="fixed-order")
    router, _ = _router(fixed, _measured())
    why = why_view(router.rank(fixed.models[0]))
    assert why.fixed and "keeps the config's order" in why_sentence(why)


def test_the_page_shows_the_why_with_the_cheapest_marked() -> None:
    config = _config()
    router, snapshot = _router(config, _measured())
    ranking = router.rank(config.models[0])
    choices = {"m": RoutingChoice(ranking.rows[0].deployment.name, "best score")}
    rows = leaderboard(snapshot, config.models)
    view = DashboardView(
        boards=model_boards(rows, config.models, choices, {"m": why_view(ranking)}),
        window_s=300, taken_at=1.0, backend="memory", health=StoreHealth(), base_url="http://x/", keys_required=False,
    )  # fmt: skip
    page = render_page(view, nonce=NONCE)
    assert_inert(page)
    assert "Why the next request goes where it goes" in page
    # The cheapest is marked in the leaderboard's rows and in the why table.
    cheap_row = re.search(r'<tr class="[^"]*" style="--c:#[0-9a-f]{6}"><td class="name">.*?</tr>', page[
        page.index('<span class="dep">cheap</span>') - 200 :
    ])  # fmt: skip
    assert cheap_row is not None and '<span class="tag cheapest">cheapest</span>' in cheap_row.group(0)
    assert page.count('<span class="tag cheapest">cheapest</span>') == 2
    for row in why_view(ranking).rows:
        assert f'<td class="num">{seconds(row.time_s)}</td><td class="num">{money(row.cost_usd)}</td>' in page


def test_the_dashboard_and_the_routes_endpoint_tell_the_same_numbers(
    fakes: Fakes, start_gateway: Callable[..., Gateway], monkeypatch: pytest.MonkeyPatch
) -> None:
    servers = [fakes.start("a", FakeBehavior(ttft_s=0.01, tokens_per_s=400, output_tokens=20)),
               fakes.start("b", FakeBehavior(ttft_s=0.05, tokens_per_s=100, output_tokens=20))]  # fmt: skip
    gateway = start_gateway(gateway_config(servers, policy={"extends": "balanced"}))
    client = sdk(gateway.base_url)
    for _ in range(6):
        list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True))
    wait_until(lambda: len(gateway.samples.samples) >= 6, what="samples")
    # Both predict for the answers' learned length: wait until the router heard them, or the first read may use
    # the policy's default and the second not.
    router, model = gateway.runtime.router, gateway.runtime.config.models[0]
    wait_until(lambda: router.rank(model).shape.output_source == "learned", what="the answers' learned length")
    # The traffic is over: both read the router at one moment, so that a belief's age, its chance of a change
    # since (which moves its medians) and its draws are the same for both.
    moment = router.clock()
    monkeypatch.setattr(router, "clock", lambda: moment)
    page = httpx.get(gateway.url + "/dashboard").text
    (ranking,) = httpx.get(gateway.url + "/v1/gateway/routes").json()["data"]  # loopback, no keys: allowed
    for row in ranking["deployments"]:
        predicted = row["predicted"]
        tags = r'(?:<span class="tag[^"]*"[^>]*>[^<]*</span>)*'
        cells = re.search(rf'{row["deployment"]} {tags}</td><td class="num">([^<]*)'
                          rf'</td><td class="num">([^<]*)</td>', page)  # fmt: skip
        assert cells is not None, row["deployment"]
        # The same number, to the page's rounding (the JSON rounds to 0.1 ms first).
        assert _seconds_of(cells.group(1).removeprefix("≈ ")) == _approx_seconds(predicted["time_s"])
        assert cells.group(2) == money(predicted["cost_usd"])
        # Each prediction's basis, as the routes endpoint says: its belief (medians and spreads, the answers, its
        # age, its chance of being the best).
        basis = re.search(rf'{row["deployment"]} {tags}</td>(?:<td class="num">[^<]*</td>){{2}}'
                          r'<td class="basis-cell">([^<]*)</td>', page)  # fmt: skip
        assert basis is not None, row["deployment"]
        _assert_the_same_belief(basis.group(1), row["belief"])
    exploration = ranking["exploration"]
    assert f"explored {exploration['probes']} of {exploration['requests']} requests" in page
    if "budget_paid" in exploration:  # the belief router's bound: its race budget, of streamed requests
        assert f"{exploration['budget_paid']} by a race or a shadow, within a race budget of " in page
        assert f"{exploration['budget']:.0%} of streamed requests" in page
        bound = exploration["budget_start"] + exploration["budget"] * exploration["requests"]  # every one streamed
        assert exploration["budget_paid"] <= bound


BELIEVED = re.compile(
    r"first token (.+?) ×([\d.]+) · ([\d,]+) tok/s ×([\d.]+) · (\d+) answers? · heard (\d+) s ago · best (\d+)%"
)


def _assert_the_same_belief(shown: str, belief: dict[str, Any]) -> None:
    """The page's belief line tells the routes endpoint's numbers, each to the page's rounding."""
    match = BELIEVED.fullmatch(shown)
    assert match is not None, shown
    ttft, ttft_spread, speed, speed_spread, answers, age, best = match.groups()
    assert _seconds_of(ttft) == _approx_seconds(belief["ttft_median_s"])
    assert float(ttft_spread) == pytest.approx(math.exp(belief["ttft_spread"]), abs=0.051)
    # The page rounds a speed to 1 tok/s, the JSON to 0.1.
    assert float(speed.replace(",", "")) == pytest.approx(belief["tokens_per_s_median"], abs=0.56)
    assert float(speed_spread) == pytest.approx(math.exp(belief["tokens_per_s_spread"]), abs=0.051)
    assert int(answers) == belief["answers"] >= 1
    assert int(age) == pytest.approx(belief["age_s"], abs=0.51)  # the page rounds to a second, the JSON to 10 ms
    assert f"{best}%" == f"{belief['p_best']:.0%}"


def _seconds_of(text: str) -> float:
    number, unit = text.replace(",", "").split()
    return float(number) / 1000 if unit == "ms" else float(number)


def _approx_seconds(value: float) -> object:
    tolerance = 0.00051 if value < 1 else 0.0051
    return pytest.approx(value, abs=tolerance)


def test_an_unmeasured_model_is_said_to_be_measuring() -> None:
    config = _config()
    router, _ = _router(config, [])
    why = why_view(router.rank(config.models[0]))
    assert all(r.estimated for r in why.rows)
    assert "estimated from the model's average: it is being measured" in why_sentence(why)


def _predicted(name: str, time_s: float, cost: float, **fields: Any) -> Predicted:
    return Predicted(name, time_s, cost, fields.pop("status", "ready"), "best", False, **fields)


def test_each_prediction_shows_its_basis_and_the_cheapest_is_named() -> None:
    listed = _predicted("listed", 1.0, 0.00020, answers=40.2, age_s=3.0, spread=0.12)
    cheap = _predicted("cheap", 1.2, 0.00011, answers=1.0, age_s=400.0, spread=0.5)
    new = _predicted("new", 2.0, 0.0003, status="exploring", answers=0.0)
    view = WhyView(500, 100, "given", "balanced", False, (listed, cheap, new), ttft_quantile=0.95)
    assert listed.basis == "40 answers · newest 3 s ago · ±12%"
    assert cheap.basis == "1 answer · newest 7 min ago · ±50%"
    assert new.basis == "no answer yet: the model's average"
    assert view.cheapest == "cheap"
    assert "cheap is cheapest ($0.00011) but takes 1.20 s" in why_sentence(view)
    html = render_why(view, {}, "listed")
    assert '<span class="tag cheapest">cheapest</span>' in html and "$0.00011<" in html
    assert "40 answers · newest 3 s ago · ±12%" in html and ">exploring<" in html
    assert "first token (p95)" in html
    assert "This replica" not in html  # no requests routed yet: nothing to say about exploring
    explored = dataclasses.replace(view, explored="explored 3 of 60 requests (5.0%; budget 5%)")
    assert "This replica explored 3 of 60 requests (5.0%; budget 5%)." in render_why(explored, {}, "listed")
