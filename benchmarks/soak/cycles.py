"""What each request leaves behind: reference cycles and a tracemalloc diff, in one process.

Run: ``python -m benchmarks.soak.cycles [REQUESTS]``. A gateway and two fake providers on loopback
(threads of this process), streamed requests 4 at a time: after a warm-up, two equal runs with a
tracemalloc snapshot after each (``gc.collect()`` first), the diff's top entries printed; then 200
requests under ``gc.DEBUG_SAVEALL``, the types left in cyclic garbage counted (objects freed by
reference counting never get there: what does is what the cyclic collector alone frees).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tracemalloc
from collections import Counter
from typing import Any

import httpx

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway, GatewayServers

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def load(gateway: Gateway, n: int) -> int:
    """``n`` streamed requests, 4 at a time; returns how many did not answer 200."""
    bad = 0
    async with httpx.AsyncClient(timeout=60) as client:
        gate = asyncio.Semaphore(4)

        async def one() -> None:
            nonlocal bad
            async with gate:
                response = await client.post(gateway.base_url + "/chat/completions", json=BODY)
                bad += response.status_code != 200

        await asyncio.gather(*(one() for _ in range(n)))
    return bad


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    fakes, servers = Fakes(), GatewayServers()
    try:
        a, b = (fakes.start(name, FakeBehavior(output_tokens=16)) for name in ("a", "b"))
        a.app.record = b.app.record = False
        config = gateway_config([a, b], policy={"first_token_timeout_s": 30.0})
        gateway = servers.start(config)
        gateway.samples.record = lambda sample: None  # type: ignore[method-assign]
        asyncio.run(load(gateway, 500))
        gc.collect()
        tracemalloc.start(12)
        asyncio.run(load(gateway, n))
        gc.collect()
        before = tracemalloc.take_snapshot()
        bad = asyncio.run(load(gateway, n))
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = after.compare_to(before, "traceback")
        total = sum(s.size_diff for s in stats)
        print(f"tracemalloc: {total / 1024:+.1f} KiB over {n} requests ({total / n:+.0f} B per request), {bad} failed")
        for stat in stats[:5]:
            print(f"  {stat.size_diff / 1024:+8.1f} KiB  {stat.traceback.format()[-2].strip()}")
        gc.set_debug(gc.DEBUG_SAVEALL)
        asyncio.run(load(gateway, 200))
        gc.collect()
        garbage: list[Any] = gc.garbage
        kinds = Counter(type(o).__qualname__ for o in garbage)
        ports = Counter(o.scope["server"][1] for o in garbage if type(o).__qualname__ == "RequestResponseCycle")
        gc.set_debug(0)
        garbage.clear()
        print("cyclic garbage per 200 requests:", kinds.most_common(20))
        print(f"request cycles by server port (gateway {gateway.server.port}):", dict(ports))
    finally:
        servers.stop()
        fakes.stop()


if __name__ == "__main__":
    main()
