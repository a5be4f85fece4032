"""The binding store (response id → deployment): memory and Redis, one contract; Redis down loses nothing else.

Lives beside the stats tests for their real ``redis-server`` fixtures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
from redis.asyncio import Redis

from gateway.app import AppOptions, create_app
from gateway.fakes import FakeBehavior
from gateway.sessions.bindings import UNAVAILABLE, InMemoryBindingStore, RedisBindingStore, binding_key
from tests.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import GatewayServers
from tests.support.wait import wait_until


def client_for(server: RedisServer) -> Redis:
    return Redis.from_url(server.url, decode_responses=True, socket_timeout=1, socket_connect_timeout=1)


def test_memory_store_expires_and_stays_bounded() -> None:
    clock = FakeClock()
    store = InMemoryBindingStore(clock, limit=2)
    store.put("response", "a", "1", ttl_s=10)
    assert store.get("response", "a") == "1" and store.get("session", "a") is None  # namespaced
    clock.advance(10)
    assert store.get("response", "a") is None
    for key in ("x", "y", "z"):
        store.put("response", key, key, ttl_s=10)
    assert store.get("response", "x") is None and store.get("response", "z") == "z"


def test_keys_are_hash_tagged_and_encoded_like_the_stats() -> None:
    assert binding_key("gateway", "response", "resp_1") == "{gateway:bind:response:resp_1}"
    assert binding_key("gw", "session", "a:b}{c") == "{gw:bind:session:a%3Ab%7D%7Bc}"


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]


def test_redis_store_shares_bindings_between_replicas(redis_server: RedisServer, prefix: str) -> None:
    async def scenario() -> None:
        one, two = client_for(redis_server), client_for(redis_server)
        a, b = (
            RedisBindingStore(one, prefix, lookup_timeout_s=1.0),
            RedisBindingStore(two, prefix, lookup_timeout_s=1.0),
        )
        await a.start()
        await b.start()
        try:
            a.put("response", "resp_1", "m/groq", ttl_s=30)
            assert a.get("response", "resp_1") == "m/groq"  # local at once, no I/O
            assert b.get("response", "resp_1") is None
            await a.flush()
            assert await b.lookup("response", "resp_1") == "m/groq"
            assert b.get("response", "resp_1") == "m/groq"  # cached since
            ttl = await one.ttl(binding_key(prefix, "response", "resp_1"))
            assert 0 < ttl <= 30
            a.delete("response", "resp_1")
            await a.flush()
            assert await RedisBindingStore(two, prefix).lookup("response", "resp_1") is None
        finally:
            await a.aclose()
            await b.aclose()
            await one.aclose()
            await two.aclose()

    asyncio.run(scenario())


def test_redis_down_answers_unavailable_fast_and_keeps_writes(own_redis: RedisServer, prefix: str) -> None:
    async def scenario() -> None:
        client = client_for(own_redis)
        store = RedisBindingStore(client, prefix, lookup_timeout_s=0.5)
        await store.start()
        try:
            own_redis.stop()
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await store.lookup("response", "unknown") is UNAVAILABLE
            assert store.health().degraded and "redis" in (store.health().reason or "")
            # Known unreachable now: the next lookup does not wait at all.
            started = loop.time()
            assert await store.lookup("response", "other") is UNAVAILABLE
            assert loop.time() - started < 0.05
            store.put("response", "kept", "m/a", ttl_s=60)
            assert store.get("response", "kept") == "m/a"  # serving on with its own bindings
            own_redis.start()
            async with asyncio.timeout(15):
                while store.health().degraded or store._pending:
                    await asyncio.sleep(0.05)
            assert await client.get(binding_key(prefix, "response", "kept")) == "m/a"  # written once back
        finally:
            await store.aclose()
            await client.aclose()

    asyncio.run(scenario())


def test_responses_bindings_survive_across_gateway_replicas(
    redis_server: RedisServer, prefix: str, fakes: Fakes
) -> None:
    """A response created through one replica is continued through another: the binding came by Redis."""
    a, b = fakes.start("a", FakeBehavior(output_tokens=3)), fakes.start("b", FakeBehavior(output_tokens=3))
    stats = {"stats": {"backend": "redis", "redis_url": redis_server.url, "key_prefix": prefix}}
    config = gateway_config([a, b], provider_options={n: {"apis": ["responses"]} for n in "ab"}, extra=stats, policy={})
    servers = GatewayServers()
    try:
        options = AppOptions(environ={}, binding_lookup_timeout_s=1.0)
        one = servers.serve(create_app(config, options))
        two = servers.serve(create_app(config, options))
        created = httpx.post(one.base_url + "/responses", json={"model": "m", "input": "hi"}).json()
        owner = a if created["id"] in a.app.state.responses else b
        other = b if owner is a else a
        wait_until(
            lambda: httpx.get(two.base_url + f"/responses/{created['id']}").status_code == 200,
            what="the binding reached the other replica",
        )
        follow = httpx.post(
            two.base_url + "/responses", json={"model": "m", "input": "next", "previous_response_id": created["id"]}
        )
        assert follow.status_code == 200 and follow.json()["id"] in owner.app.state.responses
        assert not any(
            r.path.endswith("/responses") and r.body and r.body.get("previous_response_id")
            for r in other.app.state.recorded
        )
        ready = httpx.get(two.url + "/readyz").json()
        assert ready["status"] == "ready"
        metrics = httpx.get(two.url + "/metrics").text
        assert 'gateway_bindings_backend_healthy{backend="redis"} 1.0' in metrics
    finally:
        servers.stop()


def test_with_redis_down_responses_are_still_served_and_readyz_says_why(
    own_redis: RedisServer, prefix: str, fakes: Fakes
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    stats = {"stats": {"backend": "redis", "redis_url": own_redis.url, "key_prefix": prefix, "redis_timeout_s": 0.2}}
    config = gateway_config([fake], provider_options={"a": {"apis": ["responses"]}}, extra=stats)
    servers = GatewayServers()
    try:
        gateway = servers.serve(create_app(config, AppOptions(environ={})))
        first = httpx.post(gateway.base_url + "/responses", json={"model": "m", "input": "hi"}).json()
        own_redis.stop()
        # The binding is this replica's own: found without Redis. An unknown one goes to the one deployment.
        body = {"model": "m", "input": "more", "previous_response_id": first["id"]}
        assert httpx.post(gateway.base_url + "/responses", json=body).status_code == 200
        wait_until(
            lambda: any("bindings" in r for r in httpx.get(gateway.url + "/readyz").json()["reasons"]),
            what="readyz names the binding store",
        )
        assert httpx.get(gateway.url + "/readyz").json()["status"] == "degraded"
        assert 'gateway_bindings_backend_healthy{backend="redis"} 0.0' in httpx.get(gateway.url + "/metrics").text
    finally:
        servers.stop()
