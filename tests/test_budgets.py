"""Dollar budgets end to end: real gateways on loopback, the fake provider, the OpenAI SDK, a real Redis.

Prices are chosen so the numbers are easy to follow: the fake answers 32 tokens and counts the
prompt as its messages' JSON length / 4, while the gateway's estimate is the whole body's length
/ 4 (larger): so each request costs less than it reserved, and a budget is never passed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.admission.spending import SpendLedger
from gateway.admission.spending.redis_store import RedisSpendStore
from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig, StatsConfig
from gateway.fakes import FakeBehavior
from gateway.redis_client import RedisConnections
from gateway.samples import Sample, SampleLog
from tests.redis_server import RedisServer
from tests.support.clients import MESSAGES, async_sdk, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers
from tests.support.wait import wait_until

KEY = "sk-gw-budgeted-0123456789"
ADMIN = "sk-gw-admin-0123456789"
ENVIRON = {"GATEWAY_ADMIN_KEY": ADMIN, "METRICS_KEY": "metrics-key-1"}
SCRAPE = {"authorization": "Bearer metrics-key-1"}


def keys_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "keys.toml"
    path.write_text(f'[[keys]]\nname = "alice"\nkey = "{KEY}"\n{body}\n')
    return str(path)


def config_for(
    upstreams: list[FakeServer],
    keys: str,
    *,
    price_in: float = 100.0,
    price_out: float = 50.0,
    policy: dict[str, Any] | None = None,
    deployments: dict[str, dict[str, Any]] | None = None,
    stats: dict[str, Any] | None = None,
    named_metrics: bool = False,
) -> GatewayConfig:
    """``named_metrics``: /metrics needs ``METRICS_KEY`` (``[server] metrics_key_env``), and names keys and teams."""
    options = {
        u.name: {"price_in": price_in, "price_out": price_out, **(deployments or {}).get(u.name, {})} for u in upstreams
    }
    extra: dict[str, Any] = {"auth": {"api_keys_file": keys}}
    if stats:
        extra["stats"] = stats
    if named_metrics:
        extra["server"] = {"metrics_key_env": "METRICS_KEY"}
    return gateway_config(upstreams, policy=policy, deployments=options, extra=extra)


def settled(gateway: Gateway) -> None:
    """Wait until every settlement handed off by finished requests is booked."""
    gateway.server.call(gateway.runtime.access.state.settled())


def spend(gateway: Gateway, **params: str) -> dict[str, Any]:
    response = httpx.get(
        gateway.url + "/v1/gateway/spend", params=params, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def costs(samples: list[Sample]) -> float:
    return sum(s.cost_usd or 0.0 for s in samples)


def test_refused_exactly_when_the_next_reservation_no_longer_fits(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    fake = fakes.start("p")
    config = config_for([fake], keys_file(tmp_path, 'budget_usd = 0.01\nbudget_window = "day"'), named_metrics=True)
    gateway = start_gateway(config, ENVIRON)
    served = 0
    with sdk(gateway.base_url, KEY) as client:
        for _ in range(10):
            try:
                client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50)
            except openai.APIStatusError as exc:
                refusal = exc
                break
            served += 1
            settled(gateway)
        else:
            pytest.fail("a $0.01 budget was never refused")
    assert refusal.status_code == 402
    error = refusal.body["error"] if isinstance(refusal.body, dict) and "error" in refusal.body else refusal.body
    assert isinstance(error, dict)
    assert error["code"] == "budget_exceeded" and error["type"] == "insufficient_quota"
    assert error["scope"] == "key" and error["name"] == "alice" and error["window"] == "day"
    assert KEY not in refusal.message and "resets at" in refusal.message
    assert refusal.response.headers["x-gateway-budget-resets-at"] == error["resets_at"]
    samples = gateway.samples.samples
    assert fake.app.state.requests == served == len(samples), "the refused request never reached the provider"
    spent, needed, limit = error["spent_usd"], error["requested_usd"], error["limit_usd"]
    assert spent == pytest.approx(costs(samples), abs=1e-9) and error["reserved_usd"] == 0
    # Refused because this reservation does not fit; the one before it did (with one answer less spent).
    assert spent + needed > limit
    assert spent - (samples[-1].cost_usd or 0.0) + needed <= limit
    assert served >= 2
    document = spend(gateway, window="day")
    (budget,) = document["budgets"]
    assert budget["spent_usd"] == pytest.approx(spent, abs=1e-9) and budget["remaining_usd"] < needed
    assert document["total_usd"] == pytest.approx(spent, abs=1e-9)
    registry = gateway.metrics.registry
    assert registry.get_sample_value("gateway_budget_refusals_total", {"scope": "key", "name": "alice"}) == 1
    # The budget gauges are read from the store at scrape time, by a scraper with the metrics key.
    assert httpx.get(gateway.url + "/metrics").status_code == 401
    assert httpx.get(gateway.url + "/metrics", headers=SCRAPE).status_code == 200
    labels = {"scope": "key", "name": "alice", "window": "day"}
    assert registry.get_sample_value("gateway_budget_limit_usd", labels) == 0.01
    assert registry.get_sample_value("gateway_budget_spent_usd", labels) == pytest.approx(spent, abs=1e-9)
    assert registry.get_sample_value("gateway_budget_remaining_usd", labels) == pytest.approx(budget["remaining_usd"])


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def test_two_replicas_share_one_budget_and_never_overspend_under_64_concurrent_requests(
    fakes: Fakes, redis_server: RedisServer, tmp_path: Path
) -> None:
    """64 requests at once, half on each of two replicas sharing one Redis.

    The bound: the settled sum stays within the budget plus one request's worst case (here it
    stays within the budget itself, since every request costs less than it reserves).
    """
    fake = fakes.start("p", FakeBehavior(ttft_s=0.05))
    # What is tested is the shared arithmetic, not Redis's latency: 64 reservations at once on a busy machine can
    # wait past the default half second for a request's Redis call (a 503, tested where Redis is down).
    stats = {"backend": "redis", "redis_url": redis_server.url, "key_prefix": "shared", "redis_request_timeout_s": 10.0}
    config = config_for([fake], keys_file(tmp_path, "budget_usd = 0.01"), price_in=10.0, price_out=5.0, stats=stats)
    servers = GatewayServers()
    logs = [SampleLog(), SampleLog()]
    replicas = [
        servers.serve(create_app(config, AppOptions(environ=ENVIRON, sinks=[log])), samples=log) for log in logs
    ]
    try:

        async def burst() -> list[bool]:
            clients = [async_sdk(r.base_url, KEY) for r in replicas]

            async def one(index: int) -> bool:
                try:
                    await clients[index % 2].chat.completions.create(model="m", messages=MESSAGES, max_tokens=50)
                except openai.APIStatusError as exc:
                    assert exc.status_code == 402 and exc.code == "budget_exceeded", exc
                    return False
                return True

            try:
                return await asyncio.gather(*(one(i) for i in range(64)))
            finally:
                for client in clients:
                    await client.close()

        served = asyncio.run(burst())
        for replica in replicas:
            settled(replica)
        samples = logs[0].samples + logs[1].samples
        # One request's worst case: the gateway's prompt estimate at the input price, 50 tokens at the output price.
        worst = max((s.prompt_tokens_estimate or 0) * 10.0 / 1e6 + 50 * 5.0 / 1e6 for s in samples)
        total = costs(samples)
        assert total <= 0.01 + worst
        assert total <= 0.01, "each request cost less than it reserved, so the budget itself holds"
        assert sum(served) == len(samples) == fake.app.state.requests
        assert 0.01 // worst <= sum(served) < 64, "as many as the budget holds at their worst, not all"
        assert all(logs), "both replicas served"
        for replica in replicas:  # either replica sees the shared numbers
            (budget,) = spend(replica, window="month")["budgets"]
            assert budget["spent_usd"] == pytest.approx(total, abs=1e-8) and budget["reserved_usd"] == 0
    finally:
        servers.stop()


def test_redis_down_refuses_budgeted_keys_and_serves_the_others(
    fakes: Fakes, redis_server: RedisServer, tmp_path: Path
) -> None:
    fake = fakes.start("p")
    path = tmp_path / "keys.toml"
    unbudgeted = '[[keys]]\nname = "free"\nkey = "sk-gw-free-0123456789"\n'
    path.write_text(f'[[keys]]\nname = "alice"\nkey = "{KEY}"\nbudget_usd = 5.0\n\n{unbudgeted}')
    stats = {"backend": "redis", "redis_url": redis_server.url}
    config = config_for([fake], str(path), stats=stats)
    servers = GatewayServers()
    try:
        gateway = servers.serve(create_app(config, AppOptions(environ=ENVIRON)))
        with sdk(gateway.base_url, KEY) as budgeted, sdk(gateway.base_url, "sk-gw-free-0123456789") as free:
            assert budgeted.chat.completions.create(model="m", messages=MESSAGES).choices
            redis_server.stop()
            before = fake.app.state.requests
            with pytest.raises(openai.InternalServerError) as refused:
                budgeted.chat.completions.create(model="m", messages=MESSAGES)
            assert refused.value.status_code == 503 and refused.value.code == "budget_unavailable"
            assert fake.app.state.requests == before, "fail closed: no provider was called"
            assert free.chat.completions.create(model="m", messages=MESSAGES).choices
        ready = httpx.get(gateway.url + "/readyz").json()
        assert ready["status"] == "degraded" and any("budgets" in r for r in ready["reasons"])
    finally:
        servers.stop()


@pytest.mark.parametrize(
    ("refuse", "restore"),
    [
        (("CONFIG", "SET", "maxmemory", "1"), ("CONFIG", "SET", "maxmemory", "0")),  # OOM under noeviction
        (("ACL", "SETUSER", "default", "-evalsha", "-eval"), ("ACL", "SETUSER", "default", "+@all")),  # NOPERM
    ],
    ids=["oom", "noperm"],
)
def test_redis_refusing_commands_is_said_once_and_on_readyz(
    fakes: Fakes,
    redis_server: RedisServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    refuse: tuple[str, ...],
    restore: tuple[str, ...],
) -> None:
    """A Redis that answers but refuses the budgets' scripts refuses budgeted requests as one that is gone does:
    ``/readyz`` names the budgets, one warning says so, and it all recovers once Redis takes commands again."""
    fake = fakes.start("p")
    path = tmp_path / "keys.toml"
    path.write_text(f'[[keys]]\nname = "alice"\nkey = "{KEY}"\nbudget_usd = 5.0\n')
    config = config_for([fake], str(path), stats={"backend": "redis", "redis_url": redis_server.url})
    servers = GatewayServers()
    try:
        gateway = servers.serve(create_app(config, AppOptions(environ=ENVIRON)))
        with sdk(gateway.base_url, KEY) as budgeted, caplog.at_level(logging.INFO, logger="gateway.spending"):
            assert budgeted.chat.completions.create(model="m", messages=MESSAGES).choices
            with redis_server.client() as admin:
                admin.execute_command(*refuse)
            for _ in range(3):
                with pytest.raises(openai.InternalServerError) as refused:
                    budgeted.chat.completions.create(model="m", messages=MESSAGES)
                assert refused.value.status_code == 503 and refused.value.code == "budget_unavailable"
            ready = httpx.get(gateway.url + "/readyz").json()
            assert ready["status"] == "degraded" and any(
                r.startswith("budgets: Redis refuses") for r in ready["reasons"]
            ), (ready, caplog.text)
            assert len([r for r in caplog.records if r.name == "gateway.spending"]) == 1, [
                r.getMessage() for r in caplog.records
            ]
            with redis_server.client() as admin:
                admin.execute_command(*restore)

            def served() -> bool:
                try:
                    return bool(budgeted.chat.completions.create(model="m", messages=MESSAGES).choices)
                except openai.InternalServerError:
                    return False

            wait_until(served, timeout=15, what="budgeted requests served again")
        wait_until(
            lambda: not any("budgets" in r for r in httpx.get(gateway.url + "/readyz").json()["reasons"]),
            timeout=15,
            what="/readyz to drop the budgets' reason",
        )
    finally:
        servers.stop()


# -- every attempt booked once, to the deployment that produced it ----------------------------


def booked_per_deployment(gateway: Gateway) -> dict[str, tuple[float, int]]:
    settled(gateway)
    rows = spend(gateway, window="day", by="deployment")["data"]
    return {r["deployment"]: (r["cost_usd"], r["attempts"]) for r in rows}


def expected_per_deployment(samples: list[Sample]) -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    for s in samples:
        cost, attempts = out.get(s.deployment, (0.0, 0))
        out[s.deployment] = (cost + (s.cost_usd or 0.0), attempts + 1)
    return out


def assert_booked_once(gateway: Gateway, attempts: int) -> list[Sample]:
    wait_until(lambda: len(gateway.samples.samples) >= attempts, what=f"{attempts} samples")
    samples = list(gateway.samples.samples)
    assert len(samples) == attempts
    booked = booked_per_deployment(gateway)
    expected = expected_per_deployment(samples)
    assert booked.keys() == expected.keys()
    for name, (cost, count) in expected.items():
        assert booked[name][0] == pytest.approx(cost, abs=1e-9) and booked[name][1] == count
    (budget,) = spend(gateway, window="day")["budgets"]
    assert budget["spent_usd"] == pytest.approx(costs(samples), abs=1e-9) and budget["reserved_usd"] == 0
    return samples


BIG = 'budget_usd = 100.0\nbudget_window = "day"'


def test_a_fallback_books_each_attempt_once(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    a, b = fakes.start("a", FakeBehavior(status=503)), fakes.start("b")
    gateway = start_gateway(config_for([a, b], keys_file(tmp_path, BIG)), ENVIRON)
    with sdk(gateway.base_url, KEY) as client:
        response = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, max_tokens=40)
    assert response.headers["x-gateway-provider"] == "b"
    samples = assert_booked_once(gateway, 2)
    assert [(s.deployment, s.outcome) for s in samples] == [("a", "upstream_error"), ("b", "ok")]
    assert samples[0].cost_usd is None, "a 503 costs nothing, and is booked as nothing"


def test_a_hedge_books_each_attempt_once(fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path) -> None:
    a, b = fakes.start("a", FakeBehavior(ttft_s=3.0)), fakes.start("b", FakeBehavior(ttft_s=0.01))
    policy = {"hedge_after_s": 0.1, "hedge_budget": 1.0}
    gateway = start_gateway(config_for([a, b], keys_file(tmp_path, BIG), policy=policy), ENVIRON)
    with sdk(gateway.base_url, KEY) as client:
        stream = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=40, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    samples = assert_booked_once(gateway, 2)
    by_outcome = {s.outcome: s for s in samples}
    assert by_outcome["client_cancelled"].deployment == "a" and by_outcome["ok"].deployment == "b"
    assert by_outcome["client_cancelled"].cost_usd, "the loser's prompt was billed, and is booked to it"


def test_a_drained_race_loser_is_booked_once_after_its_request_ended(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    # Nothing measured: the cold start races both; b's first token comes after the client has its whole answer,
    # and b is read on for its stream (``gateway.relay.drain``): its prompt and tokens are booked when it ends.
    a = fakes.start("a", FakeBehavior(ttft_s=0.01, tokens_per_s=2000))
    b = fakes.start("b", FakeBehavior(ttft_s=0.5, tokens_per_s=2000))
    policy = {"extends": "balanced"}  # the default policy, which explores
    gateway = start_gateway(config_for([a, b], keys_file(tmp_path, BIG), policy=policy), ENVIRON)
    with sdk(gateway.base_url, KEY) as client:
        stream = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=40, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    wait_until(lambda: len(gateway.samples.samples) >= 1, what="the answer's sample")
    assert [s.deployment for s in gateway.samples.samples] == ["a"], "the answer ended before the loser's first token"
    samples = assert_booked_once(gateway, 2)
    drained = {s.deployment: s for s in samples}["b"]
    assert drained.outcome == "client_cancelled" and drained.output_tokens and drained.cost_usd


def test_a_recovered_stream_books_each_attempt_once(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    a = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    b = fakes.start("b", FakeBehavior(output_tokens=8))
    policy = {"first_token_timeout_s": 2.0, "idle_timeout_s": 0.3}
    deployments = {"b": {"continue_prefill": True}}
    gateway = start_gateway(
        config_for([a, b], keys_file(tmp_path, BIG), policy=policy, deployments=deployments), ENVIRON
    )
    with sdk(gateway.base_url, KEY) as client:
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.split() == "the quick brown fox jumps over lazy dog".split()
    samples = assert_booked_once(gateway, 2)
    assert [(s.deployment, s.outcome) for s in samples] == [("a", "broken_stream"), ("b", "ok")]
    assert all(s.cost_usd for s in samples), "the broken attempt's output was billed too"


def test_the_access_log_carries_each_attempts_cost(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = fakes.start("a", FakeBehavior(status=503)), fakes.start("b")
    gateway = start_gateway(config_for([a, b], keys_file(tmp_path, 'team = "search"'), named_metrics=True), ENVIRON)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        with sdk(gateway.base_url, KEY) as client:
            client.chat.completions.create(model="m", messages=MESSAGES)
        wait_until(lambda: any(r.name == "gateway.access" for r in caplog.records), what="the access-log line")
    (line,) = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    assert line["key"] == "alice" and line["team"] == "search" and KEY not in json.dumps(line)
    a_cost, b_cost = line["attempt_costs"]
    assert (a_cost["deployment"], a_cost["outcome"], a_cost["cost_usd"]) == ("a", "upstream_error", None)
    assert b_cost["deployment"] == "b" and b_cost["cost_usd"] == pytest.approx(line["cost_usd"])
    settled(gateway)
    # No budget of its own: the spend is still reported by key and team, and counted in the metrics.
    rows = spend(gateway, by="key,team")["data"]
    assert rows == [{"key": "alice", "team": "search", "cost_usd": pytest.approx(line["cost_usd"]), "attempts": 2}]
    value = gateway.metrics.registry.get_sample_value(
        "gateway_spend_usd_total", {"key": "alice", "team": "search", "model": "m", "provider": "b"}
    )
    assert value == pytest.approx(line["cost_usd"])


def test_spend_needs_the_admin_key_and_valid_parameters(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    fake = fakes.start("p")
    gateway = start_gateway(config_for([fake], keys_file(tmp_path, BIG)), ENVIRON)
    url = gateway.url + "/v1/gateway/spend"
    assert httpx.get(url, headers={"authorization": f"Bearer {KEY}"}).status_code == 403
    admin = {"authorization": f"Bearer {ADMIN}"}
    bad = httpx.get(url, params={"window": "year"}, headers=admin)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "window"
    assert httpx.get(url, params={"by": "colour"}, headers=admin).status_code == 400


def test_redis_store_is_used_for_replicas(redis_server: RedisServer) -> None:
    """``[stats] backend = "redis"`` gives the budgets a Redis store (the replicas' shared one)."""
    from gateway.admission.spending.factory import open_spend_store

    config = StatsConfig(backend="redis", redis_url=redis_server.url)
    redis = RedisConnections(config, {})
    store = open_spend_store(config, redis)
    assert isinstance(store, RedisSpendStore)

    async def close() -> None:
        await SpendLedger(store).store.aclose()
        await redis.aclose()

    asyncio.run(close())


def test_gateway_spend_prints_a_table_json_and_csv(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from gateway.cli import main

    fake = fakes.start("p")
    gateway = start_gateway(config_for([fake], keys_file(tmp_path, 'team = "search"\n' + BIG)), ENVIRON)
    with sdk(gateway.base_url, KEY) as client:
        client.chat.completions.create(model="m", messages=MESSAGES)
    settled(gateway)
    env = {"PATH": "/usr/bin:/bin", "GATEWAY_ADMIN_KEY": ADMIN}
    table = subprocess.run(
        [sys.executable, "-m", "gateway", "spend", "--url", gateway.url, "--window", "day"],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("spend per day ") and "memory store" in lines[0]
    assert any("alice" in line and "search" in line and "p" in line for line in lines[1:4])
    assert any(line.startswith("key") and "alice" in line and "100" in line for line in lines)  # the budget
    assert ADMIN not in table.stdout and KEY not in table.stdout

    assert main(["spend", "--url", gateway.url, "--admin-key", ADMIN, "--json", "--by", "team"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [r["team"] for r in document["data"]] == ["search"] and document["window"] == "month"
    assert main(["spend", "--url", gateway.url, "--admin-key", ADMIN, "--csv", "--by", "key,provider"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header == "window,period,key,provider,cost_usd,attempts" and row.startswith("month,") and ",alice,p," in row
    assert main(["spend", "--url", gateway.url, "--admin-key", "wrong"]) == 1
    assert "401" in capsys.readouterr().err


def test_the_window_resets_at_the_time_the_refusal_states(fakes: Fakes, tmp_path: Path) -> None:
    from datetime import datetime

    from gateway.admission.spending import InMemorySpendStore
    from tests.support.clock import FakeClock

    fake = fakes.start("p")
    clock = FakeClock(datetime.fromisoformat("2026-12-01T23:59:00+00:00").timestamp())
    config = config_for([fake], keys_file(tmp_path, 'budget_usd = 0.005\nbudget_window = "day"'))
    servers = GatewayServers()
    try:
        options = AppOptions(environ=ENVIRON, spend=SpendLedger(InMemorySpendStore(), clock))
        gateway = servers.serve(create_app(config, options))
        with sdk(gateway.base_url, KEY) as client:
            assert client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50).choices
            settled(gateway)
            with pytest.raises(openai.APIStatusError) as refused:
                client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50)
            assert refused.value.status_code == 402
            resets_at = refused.value.response.headers["x-gateway-budget-resets-at"]
            assert resets_at == "2026-12-02T00:00:00Z"
            clock.now = datetime.fromisoformat(resets_at.replace("Z", "+00:00")).timestamp() - 0.5
            with pytest.raises(openai.APIStatusError):
                client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50)
            clock.advance(0.5)
            assert client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50).choices
    finally:
        servers.stop()


def test_an_open_metrics_page_names_no_key_or_team(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    body = 'team = "search"\nbudget_usd = 5.0\nbudget_window = "day"'
    gateway = start_gateway(config_for([fakes.start("a")], keys_file(tmp_path, body)), ENVIRON)
    with sdk(gateway.base_url, KEY) as client:
        client.chat.completions.create(model="m", messages=MESSAGES)
    settled(gateway)
    page = httpx.get(gateway.url + "/metrics")
    assert page.status_code == 200  # no metrics_key_env: open
    assert "alice" not in page.text and "search" not in page.text
    registry = gateway.metrics.registry
    labels = {"key": "", "team": "", "model": "m", "provider": "a"}
    assert (registry.get_sample_value("gateway_spend_usd_total", labels) or 0) > 0  # by model and provider only
