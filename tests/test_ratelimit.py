"""Per-key rate limits: the sliding-window math, both backends with one test body, Redis failing
open, and limits shared by two gateway replicas on one real Redis."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from gateway.admission.ratelimit import WINDOW_S, Counts, InMemoryRateLimiter, RateLimiter, RedisRateLimiter, decide
from gateway.app import AppOptions, create_app
from gateway.config import StatsConfig, parse_config
from gateway.fakes.provider import FakeState
from gateway.redis_client import RedisConnections
from tests.redis_server import RedisServer
from tests.redis_topologies import SENTINEL_ENVIRON
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers
from tests.support.wait import wait_until

KEY = "sk-gw-limited-0123456789"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


class Clock:
    """A wall clock the test moves by hand, starting at the beginning of a minute."""

    def __init__(self) -> None:
        self.now = 1_000.0 * WINDOW_S

    def __call__(self) -> float:
        return self.now


def test_sliding_window_decisions() -> None:
    start = 1_000.0 * WINDOW_S
    assert decide(Counts(), 10, 0, 0, start) == (None, 0.0)
    assert decide(Counts(current_requests=2), 1, 3, 0, start)[0] is None
    limit, wait = decide(Counts(current_requests=3), 1, 3, 0, start + 15)
    # This minute alone is full: wait for it to end (45 s), then for its weight to fall to 2/3 (20 s).
    assert limit == "requests" and wait == pytest.approx(45 + 20)
    # Half a minute in, the previous minute counts half: 4 × 0.5 + 1 + 1 > 3 until its weight is 1/4.
    limit, wait = decide(Counts(previous_requests=4, current_requests=1), 1, 3, 0, start + 30)
    assert limit == "requests" and wait == pytest.approx(15)
    limit, wait = decide(Counts(previous_tokens=100, current_tokens=50), 60, 0, 150, start + 30)
    assert limit == "tokens" and wait == pytest.approx(0.6 * WINDOW_S - 30)
    assert decide(Counts(previous_tokens=100, current_tokens=50), 40, 0, 150, start + 30)[0] is None


@pytest.fixture(params=["memory", "redis", "cluster", "sentinel"])
def limiter_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Clock], RateLimiter]]:
    """The same test body runs on every backend: memory, and Redis as one server, a cluster or a Sentinel group."""
    if request.param == "memory":
        yield InMemoryRateLimiter
        return
    server: RedisServer | None = None
    prefix = f"t-{request.param}"
    if request.param == "cluster":
        config = StatsConfig(
            backend="redis",
            redis_mode="cluster",
            redis_url=request.getfixturevalue("redis_cluster").url,
            key_prefix=prefix,
        )
    elif request.param == "sentinel":
        group = request.getfixturevalue("sentinel_group")
        config = group.stats_config(key_prefix=prefix)
    else:
        server = RedisServer(tmp_path).start()
        config = StatsConfig(backend="redis", redis_url=server.url, key_prefix=prefix)

    def make(clock: Clock) -> RateLimiter:
        connections = RedisConnections(config, SENTINEL_ENVIRON)
        limiter = RedisRateLimiter(connections.requests(), config, owned=connections)
        limiter.wall_clock = clock
        limiter.fallback.wall_clock = clock
        return limiter

    yield make
    if server is not None:
        server.stop()


def test_limits_on_both_backends(limiter_factory: Callable[[Clock], RateLimiter]) -> None:
    async def scenario() -> None:
        clock = Clock()
        limiter = limiter_factory(clock)
        await limiter.start()  # as the app's lifespan does: the first request pays no connecting
        try:
            results = [await limiter.acquire("k1", 10, 3, 0) for _ in range(4)]
            assert [r.allowed for r in results] == [True, True, True, False]
            assert results[3].limit == "requests" and results[3].retry_after_s > 0
            assert (await limiter.acquire("k2", 10, 3, 0)).allowed, "keys are counted apart"
            assert (await limiter.acquire("k1", 10**9, 0, 0)).allowed, "no limits, no refusal"

            clock.now += WINDOW_S  # the full minute is now the previous one, at full weight
            assert not (await limiter.acquire("k1", 10, 3, 0)).allowed
            clock.now += WINDOW_S / 2  # ... at half weight: 1.5 + 1 fits, 1.5 + 2 does not
            assert (await limiter.acquire("k1", 10, 3, 0)).allowed
            assert not (await limiter.acquire("k1", 10, 3, 0)).allowed

            first = await limiter.acquire("t", 40, 0, 100)
            assert first.allowed and (await limiter.acquire("t", 40, 0, 100)).allowed
            refused = await limiter.acquire("t", 40, 0, 100)
            assert not refused.allowed and refused.limit == "tokens"
            await limiter.adjust("t", first.window, -30)  # the first request used less than it reserved
            assert (await limiter.acquire("t", 40, 0, 100)).allowed
            await limiter.adjust("t", first.window, +50)  # extra usage counts against this minute
            assert not (await limiter.acquire("t", 1, 0, 100)).allowed
            assert limiter.degraded_reason() is None
        finally:
            await limiter.aclose()

    asyncio.run(scenario())


def test_tokens_hold_the_worst_case_while_it_fits_else_the_likely_use(
    limiter_factory: Callable[[Clock], RateLimiter],
) -> None:
    async def scenario() -> None:
        limiter = limiter_factory(Clock())
        await limiter.start()
        try:
            worst = await limiter.acquire("a", 400, 0, 1000, likely_tokens=50)
            assert worst.allowed and worst.tokens == 400, "the worst case fits: it is what is held"
            assert (await limiter.acquire("a", 400, 0, 1000, likely_tokens=50)).tokens == 400
            likely = await limiter.acquire("a", 400, 0, 1000, likely_tokens=50)
            assert likely.allowed and likely.tokens == 50, "800 + 400 > 1000: the likely use is held"
            refused = await limiter.acquire("a", 400, 0, 1000)
            assert not refused.allowed and refused.limit == "tokens", "without a likely use, nothing changes"
            # 850 held: even the likely use no longer fits, and the wait is the likely use's.
            full = await limiter.acquire("a", 400, 0, 900, likely_tokens=60)
            assert not full.allowed and full.limit == "tokens" and full.tokens == 0
            await limiter.adjust("a", likely.window, 30 - 50)  # settled to its real use
            assert (await limiter.acquire("a", 400, 0, 900, likely_tokens=60)).tokens == 60
            # A request refused on requests is not retried on its likely tokens.
            assert (await limiter.acquire("r", 400, 1, 1000, likely_tokens=5)).allowed
            assert (await limiter.acquire("r", 400, 1, 1000, likely_tokens=5)).limit == "requests"
        finally:
            await limiter.aclose()

    asyncio.run(scenario())


def test_redis_failure_keeps_counting_here_and_logs_once(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        limiter = RedisRateLimiter.from_config(StatsConfig(backend="redis", redis_url=redis_server.url))
        limiter.backoff.max_s = limiter.backoff.min_s = 1e-6  # try Redis again at once: its return is seen
        try:
            assert (await limiter.acquire("k", 1, 2, 0)).allowed
            await limiter.sync()
            redis_server.stop()
            # The replica goes on with what it counted: one more fits under 2.
            counted_from = int(limiter.wall_clock() // WINDOW_S)  # the minute it counts in (the test may cross one)
            assert [(await limiter.acquire("k", 1, 2, 0)).allowed for _ in range(3)] == [True, False, False]
            await limiter.sync()
            reason = limiter.degraded_reason()
            assert reason is not None and "Redis unreachable" in reason
            redis_server.start()
            await limiter.sync()  # what was counted meanwhile is pushed to the (empty) Redis
            assert limiter.degraded_reason() is None
            minutes = range(counted_from, int(limiter.wall_clock() // WINDOW_S) + 1)
            raws = [await limiter.client.hget(limiter._key("k", minute), "r") for minute in minutes]
            assert sum(int(raw) for raw in raws if raw is not None) >= 1, raws
        finally:
            await limiter.aclose()

    with caplog.at_level(logging.INFO, logger="gateway.ratelimit"):
        asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.ratelimit"]
    assert len([m for m in messages if "Redis unreachable" in m]) == 1, messages
    assert len([m for m in messages if "reachable again" in m]) == 1, messages


# -- over HTTP -------------------------------------------------------------------------------


@pytest.fixture
def replicas(fakes: Fakes, tmp_path: Path) -> Iterator[Callable[..., tuple[FakeServer, list[Gateway]]]]:
    """Starts gateways on one fake provider, each with its own rate limiter (Redis or memory)."""
    servers = GatewayServers()

    def start(
        count: int, key_limits: str, redis_url: str | None = None, limits: dict[str, int] | None = None
    ) -> tuple[FakeServer, list[Gateway]]:
        fake = fakes.start("p")
        keys = tmp_path / "keys.toml"
        keys.write_text(f'[[keys]]\nname = "limited"\nkey = "{KEY}"\n{key_limits}\n')
        config = parse_config(
            {
                "providers": [{"name": "p", "base_url": fake.base_url}],
                "models": [{"name": "m", "deployments": [{"provider": "p", "model": "up"}]}],
                "auth": {"api_keys_file": str(keys)},
                "limits": limits or {},
            },
            source="test.toml",
        )
        gateways = []
        for _ in range(count):
            limiter = None
            if redis_url is not None:
                limiter = RedisRateLimiter.from_config(StatsConfig(backend="redis", redis_url=redis_url))
            gateways.append(servers.serve(create_app(config, AppOptions(environ={}, rate_limiter=limiter))))
        return fake, gateways

    yield start
    servers.stop()


MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def test_requests_per_minute_shared_by_replicas(
    replicas: Callable[..., tuple[FakeServer, list[Gateway]]], redis_server: RedisServer
) -> None:
    _, (first, second) = replicas(2, "requests_per_minute = 3", redis_server.url)

    def reconcile() -> None:
        """Each replica's background reconciliation, run now: pushed by both, then read by both."""
        for gateway in (first, second, first, second):
            limiter = gateway.runtime.access.state.limiter
            assert isinstance(limiter, RedisRateLimiter)
            gateway.server.call(limiter.sync())

    with (
        openai.OpenAI(base_url=first.base_url, api_key=KEY, max_retries=0) as one,
        openai.OpenAI(base_url=second.base_url, api_key=KEY, max_retries=0) as two,
    ):
        for client in (one, two, one):
            assert client.chat.completions.create(model="m", messages=MESSAGES).choices
            reconcile()
        with pytest.raises(openai.RateLimitError) as refused:
            two.chat.completions.create(model="m", messages=MESSAGES)
    error = refused.value
    assert error.status_code == 429 and error.type == "rate_limit_error" and error.code == "rate_limit_exceeded"
    assert int(error.response.headers["retry-after"]) >= 1
    assert "3 requests per minute" in error.message and "'limited'" in error.message and KEY not in error.message


def test_redis_outage_keeps_serving(
    replicas: Callable[..., tuple[FakeServer, list[Gateway]]], redis_server: RedisServer
) -> None:
    _, (gateway,) = replicas(1, "requests_per_minute = 100", redis_server.url)
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
        assert client.chat.completions.create(model="m", messages=MESSAGES).choices
        redis_server.stop()
        for _ in range(3):
            assert client.chat.completions.create(model="m", messages=MESSAGES).choices
    # The next background reconciliation finds Redis gone: the replica says it counts alone.
    wait_until(lambda: httpx.get(gateway.url + "/readyz").json()["status"] == "degraded", what="degraded")
    ready = httpx.get(gateway.url + "/readyz").json()
    assert any("Redis unreachable" in r for r in ready["reasons"])


def test_tokens_per_minute_counts_actual_output(
    replicas: Callable[..., tuple[FakeServer, list[Gateway]]],
) -> None:
    """Admission reserves prompt + max_tokens; the fake answers 32 tokens, and the rest is given back.

    Without the correction, the second request (2 × ~198 tokens reserved) would pass 250.
    """
    _, (gateway,) = replicas(1, "tokens_per_minute = 250")
    runtime = gateway.runtime
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
        assert client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=180).choices
        gateway.server.call(runtime.access.state.settled())
        assert client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=180).choices
        gateway.server.call(runtime.access.state.settled())
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=180)
        assert "250 tokens per minute" in refused.value.message
        assert int(refused.value.response.headers["retry-after"]) >= 1
        with pytest.raises(openai.RateLimitError) as too_large:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1000)
        assert too_large.value.code == "tokens_exceed_limit" and "retry-after" not in too_large.value.response.headers


def _hold_a_stream(client: openai.OpenAI, fake_state: FakeState) -> openai.Stream[ChatCompletionChunk]:
    """Open a slowly paced stream and wait until the fake provider is serving it."""
    slow = {"fake": {"tokens_per_s": 5, "output_tokens": 200}}
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True, extra_body=slow)
    deadline = time.monotonic() + 10
    while fake_state.open_streams < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake_state.open_streams == 1
    return stream


def _eventually_served(client: openai.OpenAI) -> None:
    """The slot comes back once the gateway has noticed the closed stream (asynchronously): poll for it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            assert client.chat.completions.create(model="m", messages=MESSAGES).choices
            return
        except (openai.RateLimitError, openai.InternalServerError):
            time.sleep(0.01)
    pytest.fail("the in-flight slot was not released after the stream closed")


def test_in_flight_limit_per_key(replicas: Callable[..., tuple[FakeServer, list[Gateway]]]) -> None:
    fake, (gateway,) = replicas(1, "max_in_flight = 1")
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
        stream = _hold_a_stream(client, fake.app.state)
        try:
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="m", messages=MESSAGES)
            assert refused.value.code == "too_many_requests_in_flight"
            assert refused.value.response.headers["retry-after"] == "1"
        finally:
            stream.close()
        _eventually_served(client)


def test_in_flight_limit_overall(replicas: Callable[..., tuple[FakeServer, list[Gateway]]]) -> None:
    fake, (gateway,) = replicas(1, "", limits={"max_in_flight": 1})
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
        stream = _hold_a_stream(client, fake.app.state)
        try:
            with pytest.raises(openai.InternalServerError) as refused:
                client.chat.completions.create(model="m", messages=MESSAGES)
            assert refused.value.status_code == 503 and refused.value.code == "overloaded"
            assert "maximum of 1 requests at once" in refused.value.message
            assert refused.value.response.headers["retry-after"] == "1"
        finally:
            stream.close()
        _eventually_served(client)


def test_a_client_library_error_fails_open_too(redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """redis-py's cluster client can raise what is no RedisError mid-failover (a connection that
    another task disconnected under it); the limits still hold, on this replica's counts. No real
    server reproduces that on demand, so the reconciliation's exchange is replaced by one that raises it."""

    async def scenario() -> None:
        limiter = RedisRateLimiter.from_config(StatsConfig(backend="redis", redis_url=redis_server.url))

        async def broken(*_: object) -> list[object]:
            raise AttributeError("'NoneType' object has no attribute 'writelines'")

        limiter._exchange = broken  # type: ignore[method-assign, assignment]
        try:
            assert [(await limiter.acquire("k", 1, 2, 0)).allowed for _ in range(3)] == [True, True, False]
            await limiter.sync()
            assert limiter.degraded_reason() is not None
        finally:
            limiter._task = None
            await limiter.aclose()

    with caplog.at_level(logging.WARNING, logger="gateway.ratelimit"):
        asyncio.run(scenario())
    (record,) = [r for r in caplog.records if r.name == "gateway.ratelimit"]
    assert record.exc_info is not None and "writelines" in str(record.exc_info[1])


def test_a_hung_redis_adds_no_latency_to_limited_requests(
    replicas: Callable[..., tuple[FakeServer, list[Gateway]]], redis_server: RedisServer
) -> None:
    _, (gateway,) = replicas(1, "requests_per_minute = 1000", redis_server.url)
    assert redis_server.process is not None
    pid = redis_server.process.pid
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
        assert client.chat.completions.create(model="m", messages=MESSAGES).choices
        os.kill(pid, signal.SIGSTOP)  # hung: connections open, nothing answered
        try:
            took = []
            for _ in range(5):
                started = time.monotonic()
                assert client.chat.completions.create(model="m", messages=MESSAGES).choices
                took.append(time.monotonic() - started)
        finally:
            os.kill(pid, signal.SIGCONT)
    # Not the 0.5 s a request used to wait on Redis (redis_request_timeout_s) before going on without it.
    assert max(took) < 0.4, took
