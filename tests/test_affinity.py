"""Sessions stay where their prompt is cached while that wins, over real loopback, the openai SDK and redis-server."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.relay.prompt_count import count_prompt
from gateway.tokens import load_token_counter
from tests.redis_server import RedisServer
from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers
from tests.support.wait import wait_until

# Prefill at 40k tokens/s: a cold ~6k-token prompt waits ~0.15 s, a warm turn a few ms.
CACHING = FakeBehavior(ttft_s=0.01, output_tokens=6, cache_prompts=1000, prefill_tokens_per_s=40_000.0)
POLICY: dict[str, Any] = {"explore_share": 0.0, "hedge_after_s": False, "first_token_timeout_s": 5.0}


def config(fakes: list[FakeServer], **policy: Any) -> GatewayConfig:
    return gateway_config(
        fakes,
        base_policy={},
        policy={**POLICY, **policy},
        deployments={f.name: {"price_cached_in": 0.1} for f in fakes},
    )


def conversation(turns: int, topic: str = "ships") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"You know {topic}. " * 2000}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i} about {topic} " * 40})
        if i < turns - 1:
            messages.append({"role": "assistant", "content": f"answer {i} " * 40})
    return messages


class Turn:
    def __init__(self, deployment: str, route: str, affinity: str | None) -> None:
        self.deployment, self.route, self.affinity = deployment, route, affinity


def turn(gateway: Gateway, messages: list[dict[str, Any]], session: str | None = "s1", **extra: Any) -> Turn:
    headers = {"x-session-id": session} if session else {}
    headers.update(extra.pop("headers", {}))
    with sdk(gateway.base_url) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=cast(Any, messages), stream=True, extra_headers=headers, **extra
        )
        for _ in raw.parse():
            pass
    return Turn(
        raw.headers["x-gateway-provider"], raw.headers["x-gateway-route"], raw.headers.get("x-gateway-affinity")
    )


def warm_up(gateway: Gateway, fakes: list[FakeServer]) -> None:
    """Two cold answers from each deployment (unique prompts, no session): each one's prefill speed is measured."""
    for fake in fakes:
        for i in range(2):
            turn(
                gateway,
                conversation(1, f"warm-up {fake.name} {i}"),
                None,
                extra_body={"provider": {"only": [fake.name]}},
            )


@pytest.fixture
def two(fakes: Fakes) -> list[FakeServer]:
    return [fakes.start("a", CACHING), fakes.start("b", CACHING)]


def test_a_session_sticks_where_its_prefix_is_cached_and_the_fake_counts_the_hits(
    two: list[FakeServer], start_gateway: Callable[..., Gateway]
) -> None:
    gateway = start_gateway(config(two))
    warm_up(gateway, two)
    before = {f.name: f.app.snapshot()["cache"]["hits"] for f in two}
    turns = [turn(gateway, conversation(n)) for n in range(1, 6)]
    home = turns[0].deployment
    assert turns[0].affinity == "new"
    assert [t.deployment for t in turns] == [home] * 5
    assert [(t.route, t.affinity) for t in turns[1:]] == [("affinity", "stay")] * 4
    fake = next(f for f in two if f.name == home)
    assert fake.app.snapshot()["cache"]["hits"] - before[home] == 4, "every follow-up found its prefix cached"
    # A sample is recorded as its answer ends, which the client may see first: wait for all nine.
    wait_until(lambda: len(gateway.samples.samples) == 9, what="the warm-ups' and the turns' samples")
    samples = [s for s in gateway.samples.samples if s.deployment == home][-4:]
    assert all(s.usage_cached_tokens and s.usage_cached_tokens > 6000 for s in samples)
    text = httpx.get(gateway.url + "/metrics").text
    assert 'gateway_session_routes_total{choice="stay",model="m",reason=""} 4.0' in text
    assert 'gateway_cached_tokens_total{model="m",provider="' + home + '"}' in text
    # What the cache saved in first-token time, at the prefill speed the home's belief learned from the warm-ups.
    saved = next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_cache_saved_ttft_seconds_total" and sample.labels.get("provider") == home
    )
    cached = sum(s.usage_cached_tokens or 0 for s in samples)
    assert cached / 400_000.0 < saved < cached / 4_000.0, (saved, cached)


def test_a_bound_deployment_that_slows_down_or_fails_loses_the_session(
    two: list[FakeServer], start_gateway: Callable[..., Gateway]
) -> None:
    gateway = start_gateway(config(two))
    warm_up(gateway, two)
    first = turn(gateway, conversation(1))
    fakes = {f.name: f for f in two}
    home, other = first.deployment, next(name for name in fakes if name != first.deployment)
    assert turn(gateway, conversation(2)).affinity == "stay"
    # It fails: the turn falls back to the other, and the session is bound there now.
    httpx.post(fakes[home].url + "/_fake/behavior", json={"status": 503})
    failed_over = turn(gateway, conversation(3))
    assert (failed_over.deployment, failed_over.route) == (other, "fallback")
    httpx.post(fakes[home].url + "/_fake/behavior", json={"status": 200})
    settled = turn(gateway, conversation(4))
    assert (settled.deployment, settled.affinity) == (other, "stay")
    # The new home slows down tenfold beyond a cold prefill elsewhere. One slow answer is read as one wild answer or
    # a change (the belief weighs both: a single outlier neither triggers a change nor is clipped); a second one
    # settles it, and the session moves.
    httpx.post(fakes[other].url + "/_fake/behavior", json={"ttft_s": 1.5})
    assert turn(gateway, conversation(5)).deployment == other
    moved = turn(gateway, conversation(6))
    if moved.deployment == other:
        assert moved.affinity == "stay"
        moved = turn(gateway, conversation(7))
    assert (moved.deployment, moved.affinity) == (home, f"move; reason=slower; from={other}")


def test_strict_stays_off_ignores_and_a_bad_header_is_a_clear_error(
    two: list[FakeServer], start_gateway: Callable[..., Gateway]
) -> None:
    gateway = start_gateway(config(two, affinity="strict"))
    first = turn(gateway, conversation(1))
    assert turn(gateway, conversation(2)).affinity == "stay"
    off = turn(gateway, conversation(3), headers={"x-gateway-affinity": "off"})
    assert off.affinity == "off"
    ordered = turn(gateway, conversation(3), extra_body={"provider": {"order": ["b", "a"]}})
    assert ordered.affinity == "off" and ordered.deployment == "b"
    with sdk(gateway.base_url) as client, pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="m", messages=cast(Any, conversation(1)), extra_headers={"x-gateway-affinity": "sometimes"}
        )
    assert "x-gateway-affinity" in str(bad.value)
    assert first.deployment in ("a", "b")


def test_the_routes_explanation_ranks_a_session_turn_where_the_plan_sends_it(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    # b's first token comes 70 ms after a's: without a session a leads. A session bound to b finds its ~6k-token
    # prompt in b's cache (no prefill, a tenth of the price), and its next turn stays there: the explanation's
    # session ranking must put b first too, as the plan of that very turn does.
    pair = [fakes.start("a", CACHING), fakes.start("b", dataclasses.replace(CACHING, ttft_s=0.08))]
    gateway = start_gateway(config(pair), environ={"GATEWAY_ADMIN_KEY": "admin"})
    warm_up(gateway, pair)
    assert turn(gateway, conversation(1), extra_body={"provider": {"only": ["b"]}}).deployment == "b"  # bound to b
    counter = load_token_counter("o200k_base")
    previous, prompt = (count_prompt({"messages": conversation(n)}, counter) for n in (1, 2))
    query = f"model=m&prompt_tokens={prompt}&session_deployment=b&cached_tokens={previous}"
    routes = httpx.get(f"{gateway.url}/v1/gateway/routes?{query}", headers={"authorization": "Bearer admin"})
    (explained,) = routes.json()["data"]
    assert explained["deployments"][0]["deployment"] == "a"  # b is not the best without its cache
    session = explained["session"]
    assert (session["deployments"][0]["deployment"], session["decision"]) == ("b", "stay"), session
    followed = turn(gateway, conversation(2))
    assert (followed.deployment, followed.route, followed.affinity) == ("b", "affinity", "stay")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def replica(servers: GatewayServers, cfg: GatewayConfig) -> Gateway:
    # These tests are about what replicas share, not the lookup's deadline (10 ms, tested with the store):
    # on a loaded machine one Redis round trip can take longer, and the turn would be routed unbound.
    return servers.serve(create_app(cfg, AppOptions(environ={}, binding_lookup_timeout_s=5.0)))


def redis_config(fakes: list[FakeServer], redis_server: RedisServer) -> GatewayConfig:
    stats = {"backend": "redis", "redis_url": redis_server.url, "key_prefix": "affinity"}
    return gateway_config(
        fakes,
        base_policy={},
        # No cold race: it would measure both equal providers on the first turn, and a replica's one noisy
        # first token of each (milliseconds apart by chance) would decide a move; these tests are about bindings.
        policy={**POLICY, "explore_race": False},
        deployments={f.name: {"price_cached_in": 0.1} for f in fakes},
        extra={"stats": stats},
    )


def session_keys(redis_server: RedisServer) -> list[str]:
    return [str(k) for k in redis_server.client().keys("{affinity:bind:session:*")]


def test_two_replicas_on_one_redis_honour_each_others_bindings(
    two: list[FakeServer], redis_server: RedisServer
) -> None:
    servers = GatewayServers()
    try:
        cfg = redis_config(two, redis_server)
        first, second = replica(servers, cfg), replica(servers, cfg)
        home = turn(first, conversation(1)).deployment
        wait_until(lambda: session_keys(redis_server), what="the session's binding in Redis")
        followed = turn(second, conversation(2))
        assert (followed.deployment, followed.affinity, followed.route) == (home, "stay", "affinity")
        back = turn(first, conversation(3))
        assert (back.deployment, back.affinity) == (home, "stay")
    finally:
        servers.stop()


def test_redis_down_mid_session_fails_no_request(two: list[FakeServer], redis_server: RedisServer) -> None:
    servers = GatewayServers()
    try:
        gateway = replica(servers, redis_config(two, redis_server))
        home = turn(gateway, conversation(1)).deployment
        wait_until(lambda: session_keys(redis_server), what="the session's binding in Redis")
        redis_server.stop()
        # This replica still holds the binding; a session it never saw is routed unbound. Nothing fails.
        assert [turn(gateway, conversation(n)).deployment for n in (2, 3)] == [home, home]
        other = turn(gateway, conversation(2, "planes"), "s2")
        assert other.affinity in ("new", "unknown")
        # Another store may see Redis gone first: wait for the binding store's own reason, not just "degraded".
        wait_until(
            lambda: any("sessions routed unbound" in r for r in httpx.get(gateway.url + "/readyz").json()["reasons"]),
            what="/readyz to name the unbound sessions",
        )
        assert httpx.get(gateway.url + "/readyz").json()["status"] == "degraded"
        assert 'gateway_bindings_backend_healthy{backend="redis"} 0.0' in httpx.get(gateway.url + "/metrics").text
    finally:
        servers.stop()
