"""What one upstream request costs the gateway's client: ``UpstreamClient.send`` and the whole body read.

    python -m benchmarks.upstream_request                        # this checkout
    python -m benchmarks.upstream_request --compare /tmp/base    # alternating with another checkout

The fake provider (its own process) answers a small non-streamed chat request; 16 tasks send 3,000 requests a
run, seven runs; the figure is the client's CPU per request (``time.process_time``, the fake's excluded), the median
run. With ``--compare``, each checkout runs in its own process (``PYTHONPATH``), alternating, three pairs: the
in-process stages (``benchmarks.hotpath --stages``) leave the upstream request out, this measures it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":32}'
REQUESTS = 3000
TASKS = 16
RUNS = 7


async def _cpu_per_request_us(base_url: str) -> float:
    from gateway.config import ProviderConfig
    from gateway.upstream import AttemptTimeouts, UpstreamClient

    timeouts = AttemptTimeouts(connect_s=10.0, read_s=60.0, total_s=300.0)
    client = UpstreamClient(ProviderConfig(name="fake", base_url=base_url, max_concurrency=2048), "sk-bench")

    async def sender(requests: int) -> None:
        for _ in range(requests):
            response = await client.send("/chat/completions", BODY, timeouts, [("x-request-tag", "bench")])
            await response.read_all()
            response.close()

    try:
        await asyncio.gather(*(sender(50) for _ in range(TASKS)))  # connections made and warm
        runs = []
        for _ in range(RUNS):
            start = time.process_time()
            await asyncio.gather(*(sender(REQUESTS // TASKS) for _ in range(TASKS)))
            runs.append((time.process_time() - start) / (REQUESTS // TASKS * TASKS) * 1e6)
        return statistics.median(runs)
    finally:
        await client.aclose()


def measure(base_url: str) -> float:
    """This process's checkout: µs of client CPU per request, the median run."""
    import uvloop

    return uvloop.run(_cpu_per_request_us(base_url))


def _in_process(checkout: Path, base_url: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = f"from benchmarks.upstream_request import measure; print(measure({base_url!r}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=checkout, check=True, capture_output=True)
    return float(out.stdout.decode().split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--compare", type=Path, help="another checkout of the gateway, run alternating with this one")
    args = parser.parse_args()
    from benchmarks import procs

    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as scratch, procs.fake_provider(Path(scratch)) as fake:
        if args.compare is None:
            print(f"{measure(fake.base_url):.1f} µs of client CPU per upstream request")
            return
        pairs = [(_in_process(here, fake.base_url), _in_process(args.compare, fake.base_url)) for _ in range(3)]
    for this, other in pairs:
        print(f"this {this:.1f} µs, {args.compare} {other:.1f} µs: {this / other:.3f}")
    ratios = statistics.median(this / other for this, other in pairs)
    print(f"median ratio this ÷ other: {ratios:.3f}")


if __name__ == "__main__":
    main()
