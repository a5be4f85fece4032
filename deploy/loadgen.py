"""Steady, mixed traffic for the docker-compose stack, so the Grafana dashboard has something to show.

Why: the stack's providers are simulated and nobody is sending requests; this client sends a
mix of short and long, streamed and whole answers to every model, at a bounded rate and
concurrency, the way a small application would. It needs only httpx (a dependency of the
gateway, so it runs in the gateway's image) and stops after ``--requests`` or ``--duration``.

    python deploy/loadgen.py --base-url http://127.0.0.1:8080/v1 --api-key demo-key --rate 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence

import httpx

PROMPTS = (
    "Classify the sentiment of: 'the delivery was late again'. Answer with one word.",
    "Summarise the plot of a heist film in three sentences.",
    "Write a short essay on why caches need expiry.",
    "List five uses of a hash map, one line each.",
)
MAX_TOKENS = (8, 32, 128, 512)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base-url", default="http://gateway:8080/v1")
    parser.add_argument("--api-key", default="demo-key")
    parser.add_argument("--models", default="", help="comma-separated; default: all of GET /v1/models")
    parser.add_argument("--rate", type=float, default=4.0, help="requests started per second")
    parser.add_argument("--concurrency", type=int, default=16, help="most requests in flight")
    parser.add_argument("--stream-share", type=float, default=0.8)
    parser.add_argument("--requests", type=int, default=0, help="stop after this many (0: no limit)")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


async def wait_for_models(client: httpx.AsyncClient, deadline: float) -> list[str]:
    """The gateway's model names, waiting for it to come up (compose starts everything at once)."""
    while True:
        try:
            response = await client.get("/models")
            response.raise_for_status()
            return [m["id"] for m in response.json()["data"]]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"loadgen: the gateway did not answer GET /models: {exc}") from exc
            await asyncio.sleep(1.0)


async def one_request(client: httpx.AsyncClient, rng: random.Random, model: str, stream_share: float) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
        "max_tokens": rng.choice(MAX_TOKENS),
        "stream": rng.random() < stream_share,
    }
    try:
        async with client.stream("POST", "/chat/completions", json=body) as response:
            async for _ in response.aiter_bytes():
                pass
            return str(response.status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def run(args: argparse.Namespace) -> Counter[str]:
    rng = random.Random(args.seed)
    headers = {"authorization": f"Bearer {args.api_key}"}
    timeout = httpx.Timeout(connect=5.0, read=120.0, write=10.0, pool=None)
    limits = httpx.Limits(max_connections=args.concurrency)
    results: Counter[str] = Counter()
    async with httpx.AsyncClient(base_url=args.base_url, headers=headers, timeout=timeout, limits=limits) as client:
        models = [m for m in args.models.split(",") if m] or await wait_for_models(client, time.monotonic() + 120)
        slots = asyncio.Semaphore(args.concurrency)
        started = time.monotonic()
        tasks: set[asyncio.Task[None]] = set()

        async def send(model: str) -> None:
            try:
                results[await one_request(client, rng, model, args.stream_share)] += 1
            finally:
                slots.release()

        sent = 0
        while (not args.requests or sent < args.requests) and (
            not args.duration or time.monotonic() - started < args.duration
        ):
            await slots.acquire()
            task = asyncio.create_task(send(rng.choice(models)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
            if sent % 200 == 0:
                print(json.dumps({"sent": sent, "results": dict(results)}), flush=True)
            await asyncio.sleep(1.0 / args.rate if args.rate > 0 else 0.0)
        await asyncio.gather(*tasks)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = asyncio.run(run(args))
    print(json.dumps({"done": sum(results.values()), "results": dict(results)}), flush=True)
    return 0 if results.get("200", 0) == sum(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
