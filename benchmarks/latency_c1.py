"""Where the gateway's added first-token time at concurrency 1 goes: its own path, or the last request's tail.

At c=1 the load generator sends the next request as soon as the last one's stream ends. The gateway
ends the client's stream first and then does the request's tail work (the meter's finish, the sample
to the router and the sinks, the access-log line), all on the one event loop: a request that arrives
meanwhile waits for it. This sends one streamed request at a time, back to back and again with a
pause between requests (longer than any tail), through the passthrough and the gateway, each pinned
to core 1 (the fake and this client on core 0), and prints each target's time to first token over
going direct: the difference between the two gateway figures is what the last request's tail costs
the next one's first token.

    python -m benchmarks.latency_c1 --requests 400 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import uvloop

from benchmarks import procs
from benchmarks.loadgen import FIRST_TOKEN

HERE = Path(__file__).resolve().parent
BODY = (
    b'{"model":"bench","messages":[{"role":"user","content":"Say something."}],"stream":true,'
    b'"fake":{"ttft_s":0,"tokens_per_s":0,"output_tokens":32}}'
)


async def ttfts(url: str, requests: int, pause_s: float) -> list[float]:
    """Each request's time to its first token (s), one request at a time, ``pause_s`` between them."""
    found: list[float] = []
    async with aiohttp.ClientSession() as session:
        for index in range(requests + 20):  # the first 20 warm the connection and the servers
            started = time.perf_counter()
            first = None
            async with session.post(url, data=BODY, headers={"content-type": "application/json"}) as response:
                async for chunk in response.content.iter_any():
                    if first is None and FIRST_TOKEN.search(chunk):
                        first = time.perf_counter() - started
            if index >= 20 and first is not None:
                found.append(first)
            if pause_s:
                await asyncio.sleep(pause_s)
    return found


def p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause-ms", type=float, default=3.0)
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    config_text = (HERE / "gateway.bench.toml").read_text()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        with procs.fake_provider(folder) as fake:
            os.sched_setaffinity(fake.pid, {0})
            config = config_text.replace("{fake_base_url}", fake.base_url)
            with procs.passthrough(fake, folder) as passthrough, procs.gateway(config, "gateway", folder) as gateway:
                for proxy in (passthrough, gateway):
                    os.sched_setaffinity(proxy.pid, {1})
                targets = {"direct": fake, "passthrough": passthrough, "gateway": gateway}
                rows: dict[tuple[str, float], list[float]] = {}
                for _ in range(args.rounds):
                    for pause in (0.0, args.pause_ms / 1e3):
                        for name, server in targets.items():
                            found = uvloop.run(ttfts(server.chat_url, args.requests, pause))
                            rows.setdefault((name, pause), []).append(p50_ms(found))
    print(f"TTFT p50 over {args.requests} requests at c=1, median of {args.rounds} rounds (ms):")
    print("| target | back to back | added | paused | added |")
    print("|---|---|---|---|---|")
    pause_s = args.pause_ms / 1e3
    direct = {p: statistics.median(rows[("direct", p)]) for p in (0.0, pause_s)}
    for name in ("direct", "passthrough", "gateway"):
        tight, paused = statistics.median(rows[(name, 0.0)]), statistics.median(rows[(name, pause_s)])
        print(f"| {name} | {tight:.3f} | {tight - direct[0.0]:+.3f} | {paused:.3f} | {paused - direct[pause_s]:+.3f} |")


if __name__ == "__main__":
    main()
