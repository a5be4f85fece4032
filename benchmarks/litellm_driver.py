"""Replays a routing-benchmark schedule through LiteLLM's latency-based Router, straight to the fakes.

Run by ``benchmarks/routing.py`` with the interpreter of a separate virtualenv in which LiteLLM
is installed (it is never a dependency of the gateway). Reads a JSON spec on stdin (providers,
the schedule of requests, behaviour changes of the fakes), prints one JSON list of outcomes.
Standalone on purpose: it imports nothing from this repository.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx
from litellm import Router  # type: ignore[import-not-found]  # LiteLLM's own virtualenv only


async def _changes(spec: dict[str, Any], started: float) -> None:
    async with httpx.AsyncClient() as client:
        for change in spec["changes"]:
            await asyncio.sleep(max(0.0, started + change["at_s"] - time.perf_counter()))
            (await client.post(change["url"] + "/_fake/behavior", json=change["behavior"])).raise_for_status()


async def _one(router: Router, planned: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"index": planned["index"], "ok": False}
    started = time.perf_counter()
    words = 0
    try:
        stream = await router.acompletion(
            model="m",
            messages=[{"role": "user", "content": f"request {planned['index']}: answer at length"}],
            stream=True,
            max_tokens=planned["tokens"],
        )
        async for chunk in stream:
            model = getattr(chunk, "model", None) or ""
            out["provider"] = names.get(model.split("/")[-1], out.get("provider", "-"))
            for choice in chunk.choices or ():
                content = getattr(choice.delta, "content", None) or ""
                if content and "ttft_s" not in out:
                    out["ttft_s"] = time.perf_counter() - started
                words += len(content.split())
        out["ok"] = words > 0
    except Exception as exc:  # noqa: BLE001 - the outermost handler of one request: record and go on
        out["error"] = repr(exc)[:200]
    out["e2e_s"] = time.perf_counter() - started
    out["words"] = words
    return out


async def main() -> None:
    spec = json.load(sys.stdin)
    model_list = [
        {
            "model_name": "m",
            "litellm_params": {"model": f"openai/{p['name']}-m", "api_base": p["url"], "api_key": "unused"},
        }
        for p in spec["providers"]
    ]
    names = {f"{p['name']}-m": p["name"] for p in spec["providers"]}
    router = Router(model_list=model_list, routing_strategy="latency-based-routing", num_retries=2)
    started = time.perf_counter()
    changer = asyncio.ensure_future(_changes(spec, started))
    tasks = []
    for planned in spec["requests"]:
        await asyncio.sleep(max(0.0, started + planned["at_s"] - time.perf_counter()))
        tasks.append(asyncio.ensure_future(_one(router, planned, names)))
    outcomes = await asyncio.gather(*tasks)
    await changer
    json.dump(outcomes, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
