"""The router serving the live gateway, explained: ``GET /v1/gateway/routes``, the routing trace and the
dashboard show each deployment's belief (median and spread of first token and speed, its age, its chance of
being the best for a typical request); a reload keeps the beliefs, and ``GATEWAY_ROUTER`` (which once picked
between two routers) is read no more."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import httpx
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig
from gateway.dashboard.why import render_why, why_view
from gateway.fakes import FakeBehavior
from gateway.routing import Candidate, RouteRequest
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.routing.choose import RACE_BUDGET
from gateway.routing.explain import ranking_json, ranking_table
from gateway.routing.ranking import Ranking
from gateway.routing.serving import ServingRouter, build_router
from gateway.routing.trace import build_trace
from gateway.stats import InMemoryStatsStore
from tests.support.clients import MESSAGES
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.samples import make_sample

BELIEF_KEYS = {
    "ttft_median_s",
    "ttft_spread",
    "tokens_per_s_median",
    "tokens_per_s_spread",
    "age_s",
    "answers",
    "changed_since_heard",
    "failure",
    "p_best",
}
CONFIG = gateway_config(["fast", "slow"], policy={"extends": "balanced"})


def _taught(config: GatewayConfig = CONFIG) -> tuple[LiveBeliefRouter, FakeClock]:
    """A belief router that heard 30 answers from each deployment: ``fast`` about 0.3 s to a first token and
    200 tokens/s, ``slow`` about 1.2 s and 40 tokens/s (each heard in config order); the last answer 5 s ago."""
    clock = FakeClock()
    router = LiveBeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = config.models[0]
    figures = {"fast": (0.3, 200.0), "slow": (1.2, 40.0)}
    rng = random.Random(2)
    for _ in range(30):
        for deployment, (ttft, tps) in ((d, figures[d.name]) for d in model.deployments):
            clock.advance(0.5)
            candidate = Candidate(deployment, config.provider(deployment.provider), model=model.name)
            assert router.attempt_started(candidate)
            noisy_ttft, noisy_tps = ttft * math.exp(rng.gauss(0, 0.2)), tps * math.exp(rng.gauss(0, 0.2))
            router.attempt_finished(
                candidate, make_sample(deployment=deployment.name, ttft_s=noisy_ttft, tokens_per_s=noisy_tps)
            )
    clock.advance(5.0)
    return router, clock


def test_each_deployment_shows_its_belief_and_its_chance_of_being_best() -> None:
    router, _ = _taught()
    ranking = router.rank(CONFIG.models[0])
    assert [row.deployment.name for row in ranking.rows] == ["fast", "slow"]
    fast, slow = (row.belief for row in ranking.rows)
    assert fast is not None and slow is not None
    assert 0.3 / 1.25 < fast.ttft_s < 0.3 * 1.25 and 200 / 1.25 < fast.tokens_per_s < 200 * 1.25
    assert 1.2 / 1.25 < slow.ttft_s < 1.2 * 1.25 and 40 / 1.25 < slow.tokens_per_s < 40 * 1.25
    assert 0.0 < fast.ttft_spread < 1.0 and 0.0 < fast.tokens_per_s_spread < 1.0
    assert fast.age_s == pytest.approx(5.5) and slow.age_s == pytest.approx(5.0)
    assert (fast.answers, slow.answers) == (30, 30)
    assert fast.best > 0.9 and fast.best + slow.best == pytest.approx(1.0)
    assert 0.0 < fast.changed < 0.1  # heard 5 s ago: a change since is unlikely


def test_the_routes_json_carries_each_belief_and_what_exploring_cost() -> None:
    router, _ = _taught()
    body = ranking_json(router.rank(CONFIG.models[0]))
    fast, slow = body["deployments"]
    assert set(fast["belief"]) == BELIEF_KEYS and set(slow["belief"]) == BELIEF_KEYS
    assert fast["belief"]["p_best"] > slow["belief"]["p_best"]
    assert fast["belief"]["age_s"] == 5.5 and fast["belief"]["answers"] == 30
    # The prediction the order rests on is the belief's, for this request's shape.
    assert fast["predicted"]["time_s"] < slow["predicted"]["time_s"]
    assert {"shadows", "extra_attempts_per_request"} <= set(body["exploration"])


def test_the_routes_json_and_the_table_report_the_race_budget_and_what_it_paid_for() -> None:
    """The belief router's exploration bound is its own: ``RACE_BUDGET`` of streamed requests may race or shadow
    (one look to start), not the policy's ``explore_share``; a draw that puts another first costs no attempt and
    is reported apart."""
    router, clock = _taught()
    model = CONFIG.models[0]
    for _ in range(60):
        clock.advance(10.0)  # long enough unheard for a look at the slow one to be worth its cost
        plan = router.plan(RouteRequest(model, "chat", True, 500, 200))
        for candidate in plan.candidates[:1]:
            assert router.attempt_started(candidate)
            router.attempt_finished(candidate, make_sample(deployment=candidate.name, ttft_s=0.3, tokens_per_s=200))
    for _ in range(20):
        router.plan(RouteRequest(model, "chat", False, 500, 200))  # not streams: a draw, never a look
    ranking = router.rank(model)
    exploration = ranking_json(ranking)["exploration"]
    assert exploration["budget"] == RACE_BUDGET != CONFIG.policy_for(model).explore_share
    assert (exploration["budget_of"], exploration["budget_start"]) == ("streamed requests", 1)
    assert exploration["budget_paid"] == ranking.races + ranking.shadows >= 1
    assert exploration["budget_paid"] <= 1 + RACE_BUDGET * 60
    table = ranking_table(ranking)
    assert f"{ranking.races} by racing the leader, {ranking.shadows} in its shadow, of a race budget of 10%" in table
    assert f"; {ranking.probes - ranking.races - ranking.shadows} drawn away from the leader" in table
    assert "a look (race or shadow) within 10% of streamed requests" in table and "explore up to" not in table


def test_the_table_shows_each_chance_of_being_best() -> None:
    router, _ = _taught()
    table = ranking_table(router.rank(CONFIG.models[0]))
    header = next(line for line in table.splitlines() if line.startswith("#"))
    assert header.rstrip().endswith("p best")
    fast = next(line for line in table.splitlines() if line.startswith("1 "))
    assert fast.rstrip().endswith("%")


def test_a_fresh_routers_json_has_a_belief_per_row_and_counts_no_exploration_yet() -> None:
    router = LiveBeliefRouter(CONFIG, InMemoryStatsStore(CONFIG.stats), rng=random.Random(1), clock=FakeClock())
    body = ranking_json(router.rank(CONFIG.models[0]))
    assert all(set(row["belief"]) == BELIEF_KEYS and row["belief"]["answers"] == 0 for row in body["deployments"])
    exploration = body["exploration"]
    assert (exploration["requests"], exploration["shadows"], exploration["extra_attempts_per_request"]) == (0, 0, 0.0)


def test_a_traced_plan_carries_the_beliefs_and_an_untraced_one_pays_nothing_for_them() -> None:
    router, _ = _taught()
    request = RouteRequest(CONFIG.models[0], "chat", stream=True, prompt_tokens=500, max_tokens=200)
    assert router.plan(request).ranking is None
    plan = router.plan(RouteRequest(CONFIG.models[0], "chat", True, 500, 200, explain=True))
    assert isinstance(plan.ranking, Ranking)
    trace = build_trace("r1", plan, [], final=False)
    entries = {entry["d"]: entry for entry in trace["c"]}
    assert set(entries) == {c.name for c in plan.candidates}
    for entry in entries.values():
        assert set(entry["belief"]) == {"ttft", "tps", "n", "best", "age_s"}
        assert len(entry["belief"]["ttft"]) == 2 and len(entry["belief"]["tps"]) == 2
    assert entries["fast"]["belief"]["best"] > 0.9 and entries["fast"]["belief"]["n"] == 30


def test_the_dashboard_shows_each_belief_in_words() -> None:
    router, _ = _taught()
    view = why_view(router.rank(CONFIG.models[0]))
    fast = view.rows[0]
    assert fast.believed.startswith("first token ") and " tok/s ×" in fast.believed
    assert "heard 6 s ago" in fast.believed and fast.believed.endswith("%")
    html = render_why(view, {}, "fast")
    assert "chance best" in html and fast.believed in html


def test_the_ranking_keeps_the_plans_order_and_shows_what_breaks_a_constraint() -> None:
    """Under a fixed policy a plan keeps the config's order, whatever the beliefs: so does the ranking. One that
    breaks a soft constraint is neither drawn nor explored, and follows the others: the ranking says what it breaks
    and gives it no chance of being the best."""
    fixed = gateway_config(["slow", "fast"], policy={"extends": "fixed-order"})
    router, _ = _taught(fixed)
    ranking = router.rank(fixed.models[0])
    assert [row.deployment.name for row in ranking.rows] == ["slow", "fast"]
    plan = router.plan(RouteRequest(fixed.models[0], "chat", True, 500, None))
    assert [c.name for c in plan.candidates] == ["slow", "fast"]

    capped = gateway_config(
        ["fast", "slow"], policy={"extends": "balanced", "max_price_out": 5.0}, deployments={"fast": {"price_out": 9.0}}
    )
    router, _ = _taught(capped)
    ranking = router.rank(capped.models[0])
    assert [row.deployment.name for row in ranking.rows] == ["slow", "fast"]
    slow, fast = ranking.rows
    assert fast.status == "constraint" and fast.scored.violations == ("price_out 9 > 5",)
    assert fast.belief is not None and fast.belief.best == 0.0
    assert slow.belief is not None and slow.belief.best == 1.0 and not slow.scored.violations
    plan = router.plan(RouteRequest(capped.models[0], "chat", True, 500, None))
    assert plan.candidates[0].name == "slow"
    assert "fast: breaks price_out 9 > 5" in ranking_table(ranking)


def test_the_ranking_says_where_its_answer_length_comes_from() -> None:
    fresh = LiveBeliefRouter(CONFIG, InMemoryStatsStore(CONFIG.stats), clock=FakeClock())
    model = CONFIG.models[0]
    default = CONFIG.policy_for(model).default_output_tokens
    assert (fresh.rank(model).shape.output_tokens, fresh.rank(model).shape.output_source) == (default, "default")
    assert fresh.rank(model, max_tokens=default * 4).shape.output_source == "default"  # the default, under the cap
    assert (
        fresh.rank(model, max_tokens=20).shape.output_tokens,
        fresh.rank(model, max_tokens=20).shape.output_source,
    ) == (
        20,
        "request",
    )
    plan = fresh.plan(RouteRequest(model, "chat", True, 500, None))
    first = plan.candidates[0]
    assert fresh.attempt_started(first)
    fresh.attempt_finished(first, make_sample(deployment=first.name, output_tokens=40))
    assert fresh.rank(model).shape.output_source == "learned"  # the answers seen (``gateway.routing.lengths``)
    assert fresh.rank(model).shape.output_tokens < default


def test_a_never_heard_deployment_says_so() -> None:
    router = LiveBeliefRouter(CONFIG, InMemoryStatsStore(CONFIG.stats), clock=FakeClock())
    ranking = router.rank(CONFIG.models[0])
    for row in ranking.rows:
        assert row.belief is not None and row.belief.age_s is None and row.belief.answers == 0
        assert row.status == "exploring"
    assert "never heard" in why_view(ranking).rows[0].believed


def test_gateway_router_left_set_by_an_operator_is_not_read() -> None:
    for value in ("measured", "bayes"):  # the old default, and a value that was once refused
        create_app(CONFIG, AppOptions(environ={"GATEWAY_ROUTER": value}))
    router = build_router(CONFIG, InMemoryStatsStore(CONFIG.stats))
    assert isinstance(router, LiveBeliefRouter) and isinstance(router, ServingRouter)


def test_a_reload_hands_the_beliefs_to_the_new_router() -> None:
    previous, clock = _taught()
    router = build_router(CONFIG, previous.stats, previous=previous, clock=clock)
    assert isinstance(router, LiveBeliefRouter) and router.state is previous.state
    assert router.beliefs is previous.beliefs and router.lengths is previous.lengths
    assert router.others is previous.others  # the other replicas' answers heard: not heard again
    assert router.rank(CONFIG.models[0]).rows[0].belief == previous.rank(CONFIG.models[0]).rows[0].belief


def test_the_live_gateway_explains_the_belief_router(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    quick, sluggish = fakes.start("quick"), fakes.start("sluggish", FakeBehavior(ttft_s=0.3))
    gateway = start_gateway(gateway_config([quick, sluggish], policy={"extends": "balanced"}))
    assert isinstance(gateway.runtime.router, LiveBeliefRouter)
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    for _ in range(3):
        assert httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10).status_code == 200
    traced = httpx.post(gateway.base_url + "/chat/completions", json=body, headers={"x-gateway-trace": "1"}, timeout=10)
    trace = json.loads(traced.headers["x-gateway-trace"])
    assert trace["c"] and all({"ttft", "tps", "n", "best"} <= set(entry["belief"]) for entry in trace["c"])
    (ranking,) = httpx.get(gateway.url + "/v1/gateway/routes", timeout=10).json()["data"]  # loopback, no keys
    beliefs = {row["deployment"]: row["belief"] for row in ranking["deployments"]}
    assert set(beliefs) == {"quick", "sluggish"} and all(set(b) == BELIEF_KEYS for b in beliefs.values())
    assert sum(b["p_best"] for b in beliefs.values()) == pytest.approx(1.0)
    assert sum(b["answers"] for b in beliefs.values()) >= 3
    page = httpx.get(gateway.url + "/dashboard", timeout=10).text
    assert "chance best" in page


def test_a_gateway_told_gateway_router_measured_serves_with_the_belief_router(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a")]), {"GATEWAY_ROUTER": "measured"})
    router: ServingRouter = gateway.runtime.router
    assert isinstance(router, LiveBeliefRouter)
