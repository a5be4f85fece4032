"""What admission costs per request: key lookup, body checks, and a rate-limit decision in memory or in Redis.

Run: ``python -m benchmarks.admission`` (starts its own redis-server on a free port). Prints
microseconds per operation, the median of 5 rounds; results are written down in
``benchmarks/admission.md``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.admission.access import AccessControl, AccessState
from gateway.admission.auth import AdminKey, ClientKey, KeyLimits, KeyRing, digest_of
from gateway.admission.limits import check_shape, has_unpaired_surrogate
from gateway.admission.ratelimit import InMemoryRateLimiter, RateLimiter, RedisRateLimiter
from gateway.config import AuthConfig, LimitsConfig, StatsConfig
from tests.redis_server import RedisServer

ROUNDS = 5


def _ring(count: int) -> KeyRing:
    limits = KeyLimits(requests_per_minute=10**9, tokens_per_minute=10**12, max_in_flight=0)
    return KeyRing([ClientKey.from_digest(f"k{i}", digest_of(f"sk-key-{i:04d}"), limits) for i in range(count)])


def _body() -> dict[str, object]:
    """A typical chat request: a system prompt, a few turns, one tool (about 3 KB)."""
    turns = [{"role": "user" if i % 2 else "assistant", "content": "lorem ipsum dolor " * 20} for i in range(6)]
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    return {"model": "m", "messages": [{"role": "system", "content": "be brief"}, *turns], "tools": [tool], "n": 1}


def _time_sync(work: Callable[[], object], count: int) -> float:
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(count):
            work()
        rounds.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(rounds)


async def _time_async(work: Callable[[], Awaitable[object]], count: int) -> float:
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(count):
            await work()
        rounds.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(rounds)


async def _admission(limiter: RateLimiter, count: int) -> float:
    ring = _ring(1)
    access = AccessControl(ring, AdminKey(), AuthConfig(), LimitsConfig(), AccessState(limiter))
    scope = {"type": "http", "client": ("127.0.0.1", 1), "headers": [(b"authorization", b"Bearer sk-key-0000")]}
    body = _body()

    async def one() -> None:
        key = access.authenticate(scope)
        ticket = await access.admit(key, "m", body, "chat", 800, 256)
        ticket.release()

    try:
        return await _time_async(one, count)
    finally:
        await access.state.aclose()


def main() -> None:
    body = _body()
    print(f"body: {len(json.dumps(body))} bytes")
    for count in (1, 100, 1000):
        lookup = functools.partial(_ring(count).authenticate, "sk-key-0000")
        print(f"authenticate, {count:>4} keys: {_time_sync(lookup, 2000):8.1f} us")
    print(
        f"check_shape (depth walk):  {_time_sync(lambda: check_shape(body, 'chat', 256, LimitsConfig()), 5000):8.1f} us"
    )
    print(f"unpaired-surrogate walk:   {_time_sync(lambda: has_unpaired_surrogate(body), 5000):8.1f} us")
    print(f"admit+release, memory:     {asyncio.run(_admission(InMemoryRateLimiter(), 5000)):8.1f} us")
    with tempfile.TemporaryDirectory() as workdir:
        redis = RedisServer(Path(workdir)).start()
        try:
            limiter = RedisRateLimiter.from_config(StatsConfig(backend="redis", redis_url=redis.url))
            print(f"admit+release, redis:      {asyncio.run(_admission(limiter, 2000)):8.1f} us")
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
