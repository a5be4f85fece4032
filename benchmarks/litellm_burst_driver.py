"""Sends ``benchmarks/burst.py``'s burst through LiteLLM's Router, straight to the fakes.

Run with the interpreter of a separate virtualenv in which LiteLLM is installed (never a
dependency of the gateway). Reads a JSON spec on stdin (providers with their
``max_parallel_requests``, the burst's size and pacing), prints one JSON object: the statuses, the
end-to-end times of the answered requests, the wall time. Standalone: it imports nothing of this
repository.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

from litellm import Router  # type: ignore[import-not-found]  # LiteLLM's own virtualenv only


async def main() -> None:
    spec: dict[str, Any] = json.load(sys.stdin)
    model_list = [
        {
            "model_name": "m",
            "litellm_params": {
                "model": f"openai/{p['name']}-m",
                "api_base": p["url"],
                "api_key": "unused",
                "max_parallel_requests": p["max_parallel_requests"],
            },
        }
        for p in spec["providers"]
    ]
    router = Router(model_list=model_list, num_retries=2)
    statuses: Counter[str] = Counter()
    e2e: list[float] = []
    extra = {"fake": {"tokens_per_s": spec["tokens_per_s"], "output_tokens": spec["tokens"]}}

    async def one(at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        started = time.monotonic()
        words = 0
        try:
            stream = await router.acompletion(
                model="m",
                messages=[{"role": "user", "content": "burst"}],
                stream=True,
                max_tokens=spec["tokens"],
                extra_body=extra,
            )
            async for chunk in stream:
                for choice in chunk.choices or ():
                    words += len((getattr(choice.delta, "content", None) or "").split())
            status = "ok" if words > 0 else "empty"
        except Exception as exc:  # noqa: BLE001 - the outermost handler of one request: record and go on
            status = type(exc).__name__
        statuses[status] += 1
        if status == "ok":
            e2e.append(time.monotonic() - started)

    begin = time.monotonic() + 0.5
    count, over = spec["requests"], spec["over_s"]
    await asyncio.gather(*(one(begin + i * over / count) for i in range(count)))
    json.dump({"statuses": statuses, "e2e_s": e2e, "wall_s": time.monotonic() - begin}, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
