"""Routing under real traffic: fake providers on loopback, the gateway in front, the OpenAI SDK as client.

Speeds are chosen so that the right answer is clear (several times apart) and tolerances are
generous; every loop is bounded in count and in time.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.routing.choose import RACE_BUDGET
from gateway.routing.health import BUDGET_START
from tests.routing_sim import ADMIN_KEY, Reply, Sim, SimProvider, Sims, share, sims_fixture  # noqa: F401 (the sims fixture)
from tests.support.wait import wait_until

FAST = FakeBehavior(ttft_s=0.004, tokens_per_s=0, output_tokens=8)


def test_after_warm_up_traffic_goes_to_the_best_provider(sims: Sims) -> None:
    # First tokens a hundred milliseconds and more apart: three answers in a row slowed by a busy machine's
    # scheduling (a few ms each) must not make "fast" look like "middling" (the router trusts
    # its last three answers over the window when they all disagree with it).
    sim = sims.start(
        [
            SimProvider("slow", dataclasses.replace(FAST, ttft_s=0.3)),
            SimProvider("fast", dataclasses.replace(FAST, ttft_s=0.02)),
            SimProvider("middling", dataclasses.replace(FAST, ttft_s=0.15)),
        ],
        policy={"min_samples": 3, "explore_share": 0.05},
    )
    warm_up = sim.run(12)
    # Cold start: one race measures every deployment (the first token wins; the others are drained, read on
    # unseen by the client: their samples carry a first token and the answer they began).
    assert warm_up[0].route == "explore"
    measured = {s.deployment for s in sim.samples.samples if s.ttft_s is not None and s.output_tokens}
    assert measured == {"slow", "fast", "middling"}
    warm = len(sim.samples.samples)
    replies = sim.run(100)
    assert share(replies, "fast") >= 0.9, [(r.provider, r.route) for r in replies if r.provider != "fast"]
    # Nothing failed over: a reply of more than one attempt is an exploration race (a probe, perhaps with the
    # other contender, and the leader beside them; the first token won, and the reply says whose: explore or
    # best-score) or a tail hedge. Races are exploration, and exploration stays a small share of requests (5%).
    assert all(r.route in ("best-score", "explore", "hedge") for r in replies), [r.route for r in replies]
    assert sum(r.attempts > 1 for r in replies) <= 12, [(r.provider, r.route, r.attempts) for r in replies]
    wait_until(lambda: len(sim.samples.samples) >= warm + sum(r.attempts for r in replies), what="every sample")
    losers = [s for s in sim.samples.samples[warm:] if s.outcome != "ok"]
    assert all((s.outcome, s.hedged) == ("client_cancelled", True) for s in losers), losers


def _recent_share(sim: Sim, provider: str, want: float, within: int, window: int = 10) -> list[Reply]:
    """Send requests until the last ``window`` went to ``provider`` at least ``want`` of the time, at most ``within``.

    Bounded in requests, not seconds: what moves traffic is evidence (answers, and looks paid for by a share of
    requests), and a busy machine that slows every request down must not be read as a router that moved too late."""
    replies: list[Reply] = []
    while len(replies) < within:
        replies.append(sim.chat())
        if len(replies) >= window and share(replies[-window:], provider) >= want:
            return replies
    raise AssertionError(
        f"{provider} did not reach {want:.0%} of traffic within {within} requests: "
        f"last {window} went to {[r.provider for r in replies[-window:]]}"
    )


def test_a_slowdown_moves_traffic_and_exploration_finds_the_recovery(sims: Sims) -> None:
    # First tokens tens of milliseconds apart, so that a busy machine's scheduling noise (a few
    # milliseconds) cannot reorder them.
    a_fast = dataclasses.replace(FAST, ttft_s=0.02)
    sim = sims.start(
        [SimProvider("a", a_fast), SimProvider("b", dataclasses.replace(FAST, ttft_s=0.05))],
        # No hedging: a hedge that wins measures the recovered provider too, and this test is about exploring.
        policy={"min_samples": 3, "explore_share": 0.1, "hedge_quantile": False},
        window_s=2,
    )
    _recent_share(sim, "a", 0.8, within=60)
    sim.fakes["a"].app.behavior = dataclasses.replace(a_fast, ttft_s=0.1)  # five times slower
    _recent_share(sim, "b", 0.8, within=60)
    sim.fakes["a"].app.behavior = a_fast  # recovered
    sent = sim.fakes["a"].app.state.requests
    replies = _recent_share(sim, "a", 0.8, within=400)
    # It was found again by looking at it, not by luck: while b led, the router sent a requests of its own (a race
    # beside b, or a shadow) before a led again. Whichever first token won a race decides the reply's label
    # (explore, or b's best-score), and a shadow never answers: count the looks, not the labels. Every request that
    # reached a is a look or an answer a gave as the leader (nothing failed, nothing was hedged).
    led = sum(r.provider == "a" and r.route == "best-score" for r in replies)
    looks = sim.fakes["a"].app.state.requests - sent - led
    assert looks >= 1, [(r.provider, r.route, r.attempts) for r in replies]


def test_a_stream_that_slows_down_moves_traffic_before_its_slow_answers_end(sims: Sims) -> None:
    # a streams twice as fast as b; then its tokens/s falls tenfold, its first token as before.
    quick = FakeBehavior(ttft_s=0.01, tokens_per_s=400, output_tokens=120)
    sim = sims.start(
        [SimProvider("a", quick), SimProvider("b", dataclasses.replace(quick, ttft_s=0.03, tokens_per_s=200))],
        policy={"min_samples": 3, "explore_share": 0.05},
    )
    _recent_share(sim, "a", 0.8, within=150)
    sim.fakes["a"].app.behavior = dataclasses.replace(quick, tokens_per_s=40)  # 3 s per answer now
    url = sim.gateway.url + "/v1/gateway/routes"
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}

    def leader() -> str:
        return str(httpx.get(url, headers=headers).json()["data"][0]["deployments"][0]["deployment"])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        slowed = [pool.submit(sim.chat) for _ in range(4)]
        wait_until(lambda: leader() == "b", timeout=2.5, what="a's streams in flight judged slow")
        moved = sim.chat()
        pending = sum(not f.done() for f in slowed)
        replies = [f.result() for f in slowed]
    assert sum(r.provider == "a" for r in replies) >= 3  # sent before anything showed the slowdown
    # Chosen first (by the beliefs' means, or by the draw while they are near), not reached by a fallback.
    assert moved.provider == "b" and moved.route in ("best-score", "explore")
    assert pending >= 3  # decided while a's slow answers were still streaming


def test_short_and_long_requests_pick_different_providers(sims: Sims) -> None:
    sim = sims.start(
        [
            SimProvider("quick", FakeBehavior(ttft_s=0.004, tokens_per_s=800, output_tokens=400)),
            SimProvider("wide", FakeBehavior(ttft_s=0.06, tokens_per_s=8000, output_tokens=400, chunk_tokens=10)),
        ],
        policy={"min_samples": 3, "explore_share": 0.0},
    )
    # Warm-up: both measured on long answers, each asked by name: with ``explore_share = 0`` the router never looks
    # on its own, and whether its prior sends a long request to the unmeasured "wide" hung on the first answers'
    # timing. Long answers only: a 4-token answer's speed is its few milliseconds between chunks, which on a busy
    # machine are the scheduler's, not the provider's ("wide" read ~800 tokens/s on them against ~7,000 on long
    # answers, and the belief's spread then hid which is faster on long ones; routing_notes.md has the figures).
    for name in ("quick", "wide"):
        for _ in range(3):
            assert sim.chat(max_tokens=300, extra_body={"provider": {"only": [name]}}).provider == name
    short = [sim.chat(max_tokens=4) for _ in range(10)]
    long = [sim.chat(max_tokens=300) for _ in range(6)]
    assert share(short, "quick") >= 0.9, [r.provider for r in short]
    assert share(long, "wide") >= 0.8, [r.provider for r in long]


def test_equal_speed_picks_the_cheaper(sims: Sims) -> None:
    # Prices ten times apart, first tokens alike (0.2 s: long enough that a busy machine's scheduling stalls, which
    # fall on either side, do not outweigh the price): a router that did not weigh the price would split the traffic.
    # What is asserted is the router's pick (its looks at the other, bounded by the exploration budget, are
    # exploration's, tested apart).
    dear = dataclasses.replace(FAST, ttft_s=0.2)
    sim = sims.start(
        [
            SimProvider("dear", dear, price_in=10.0, price_out=20.0),
            SimProvider("cheap", dear, price_in=1.0, price_out=2.0),
        ],
        policy={"min_samples": 5, "explore_share": 0.05},
    )
    # Both measured first, asked by name in turn, so that whatever load the machine is under weighs on both alike
    # (left to the router, which one wins the cold race and when the budget pays for a look at the other hung on
    # timing: routing_notes.md).
    for _ in range(5):
        for name in ("dear", "cheap"):
            assert sim.chat(extra_body={"provider": {"only": [name]}}).provider == name
    replies = sim.run(60)
    picked = [reply for reply in replies if reply.route != "explore"]
    assert len(picked) >= 50 and share(picked, "cheap") >= 0.9, [(r.provider, r.route) for r in replies]


def test_headers_fallback_and_a_circuit_that_opens(sims: Sims) -> None:
    sim = sims.start(
        [SimProvider("broken", dataclasses.replace(FAST, status=503)), SimProvider("ok", FAST, 5.0, 5.0)],
        policy={"extends": "fixed-order", "failure_threshold": 2, "cooldown_s": 30},
    )
    first = sim.chat()
    assert (first.provider, first.route, first.attempts) == ("ok", "fallback", 2)
    sim.chat()
    # Two consecutive failures opened "broken"'s circuit: no more attempts there.
    later = sim.run(5)
    assert all((r.provider, r.attempts) == ("ok", 1) for r in later)
    assert sim.fakes["broken"].app.state.requests == 2
    assert ("circuit", "m", "broken", "open") in sim.events.events
    assert ("fallback", "m", "broken", "ok") in sim.events.events


def test_a_429_with_retry_after_is_honoured(sims: Sims) -> None:
    sim = sims.start(
        [SimProvider("limited", dataclasses.replace(FAST, status=429, retry_after="30")), SimProvider("ok", FAST)],
        policy={"extends": "fixed-order", "failure_threshold": 5},
    )
    assert sim.chat().attempts == 2
    assert all(r.attempts == 1 for r in sim.run(5))
    assert sim.fakes["limited"].app.state.requests == 1


def test_overrides_and_suffixes_through_http(sims: Sims) -> None:
    sim = sims.start(
        [
            SimProvider("a", FAST, 1.0, 1.0),
            SimProvider("b", dataclasses.replace(FAST, ttft_s=0.01), 5.0, 5.0),
        ],
        policy={"min_samples": 2},
    )
    sim.run(6)
    pinned = sim.chat(extra_body={"provider": {"order": ["b"], "allow_fallbacks": False}})
    assert (pinned.provider, pinned.route) == ("b", "override")
    floor = sim.chat(model="m:floor")
    assert (floor.provider, floor.route) == ("a", "override")
    recorded = sim.fakes["a"].app.state.recorded[-1].body
    assert recorded is not None and recorded["model"] == "a-upstream" and "provider" not in recorded
    assert sim.samples.samples[-1].model == "m"  # stats are kept under the model's own name
    with pytest.raises(openai.BadRequestError) as caught:
        sim.chat(extra_body={"provider": {"sort": "fastest"}})
    assert caught.value.body["param"] == "provider.sort"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        sim.chat(extra_body={"provider": {"only": ["nobody"]}})
    assert caught.value.body["param"] == "provider.only"  # type: ignore[index]


def test_max_concurrency_sends_the_overflow_elsewhere(sims: Sims) -> None:
    sim = sims.start(
        [
            SimProvider("small", FakeBehavior(ttft_s=0.05, tokens_per_s=10, output_tokens=4), max_concurrency=1),
            SimProvider("big", FakeBehavior(ttft_s=0.05, output_tokens=4)),
        ],
        policy={"extends": "fixed-order"},
    )
    with httpx.Client(base_url=sim.gateway.url) as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body) as first:
            assert first.headers["x-gateway-provider"] == "small"
            second = http.post("/v1/chat/completions", json=body)
            assert second.headers["x-gateway-provider"] == "big"
            assert second.headers["x-gateway-attempts"] == "1"
            first.read()


def test_routes_endpoint_explains_the_ranking(sims: Sims) -> None:
    # Paced streams (8 tokens at 2,000/s): every answer of a measures its speed, on a loaded machine too (unpaced,
    # its 8 tokens can arrive in one read, and its stream is then the model's average).
    paced = dataclasses.replace(FAST, tokens_per_s=2000.0)
    sim = sims.start(
        [SimProvider("a", paced), SimProvider("b", dataclasses.replace(paced, ttft_s=0.05), 2.0, 2.0)],
        policy={"min_samples": 1, "max_ttft_s": 0.03},  # b is judged on its first complete answer
    )
    sim.run(6)
    url = sim.gateway.url + "/v1/gateway/routes"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"authorization": "Bearer wrong"}).status_code == 401
    body = httpx.get(url, params={"max_tokens": 50}, headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
    (model,) = body["data"]
    assert model["model"] == "m" and model["policy"] == "sim"
    assert model["request"]["expected_output_tokens"] == 50
    a, b = model["deployments"]
    assert (a["deployment"], a["rank"], a["status"], a["circuit"]) == ("a", 1, "ready", "closed")
    assert b["deployment"] == "b" and b["violations"] and b["violations"][0].startswith("ttft ")
    assert b["predicted"]["ttft_s"] > a["predicted"]["ttft_s"] > 0
    assert b["score"] > a["score"] == 0
    assert set(a["score_parts"]) == {"time", "ttft", "throughput", "price", "failure"}
    assert a["in_flight"] == 0 and a["max_concurrency"] == 256
    # What the router believes of each, how sure it is, how old its newest answer is, what exploring is worth.
    predicted = a["predicted"]
    # (on its own answers only: the window holds the same ones, and it is not counted twice)
    assert predicted["source"] == "recent" and predicted["samples"] >= 1
    assert 0 < predicted["uncertainty"] < 4
    assert 0 <= predicted["newest_sample_age_s"] < 5
    assert a["belief"]["answers"] >= 1 and a["belief"]["p_best"] > b["belief"]["p_best"]
    exploration = model["exploration"]
    # The cold start measured both in one race (a's first token won, b was drained for its stream): counted apart
    # from the looks the race budget paid for, each of which added attempts.
    assert set(exploration) == {
        "requests", "probes", "races", "shadows", "cold_starts", "share", "budget", "budget_of", "budget_start",
        "budget_paid", "extra_attempts_per_request",
    }  # fmt: skip
    assert (exploration["requests"], exploration["cold_starts"], exploration["budget"]) == (6, 1, RACE_BUDGET)
    assert (exploration["budget_of"], exploration["budget_start"]) == ("streamed requests", BUDGET_START)
    assert exploration["budget_paid"] == exploration["races"] + exploration["shadows"]
    assert exploration["budget_paid"] <= BUDGET_START + RACE_BUDGET * 6
    assert exploration["share"] == round(exploration["probes"] / 6, 4)
    assert exploration["races"] + exploration["shadows"] <= exploration["probes"] <= 5
    assert exploration["extra_attempts_per_request"] >= (exploration["races"] + exploration["shadows"]) / 6 - 1e-4
    bad = httpx.get(url, params={"prompt_tokens": "x"}, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt_tokens"
