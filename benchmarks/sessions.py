"""Conversations over caching providers: affinity against scoring each turn alone, stickiness and an oracle.

Run: ``python -m benchmarks.sessions [--sessions 24] [--seed 7]`` (a few minutes; writes
``benchmarks/results/sessions.md``).

The scenario: sessions of 5–20 turns whose prompts grow from ~8k to ~60k tokens (a long system
prompt, then ~2.5k tokens per turn), 8 conversations at a time, over three fake providers that
cache prompt prefixes (``gateway.fakes.cache``) and whose cold prefill speeds and prices differ
(scaled down 50× from real ones, so a 60k-token cold prefill takes a second, not a minute):

    provider  prefill tok/s  base first token  price in / cached in / out (USD per 1M)
    swift     150,000        20 ms             3.00 / 0.30 / 6.00
    steady     80,000        30 ms             1.50 / 0.30 / 3.00
    thrifty    40,000        40 ms             0.80 / 0.20 / 2.00

Halfway through each run ``swift`` degrades: its first token gains 1.2 s. Every mode gets fresh
providers (empty caches) and a fresh gateway (nothing measured), and the same turns in the same order:

- ``auto``: the gateway with ``affinity = "auto"`` (sessions named by ``x-session-id``);
- ``off``: the gateway with ``affinity = "off"`` (every turn scored alone);
- ``sticky``: blind stickiness: each session's first turn routed by the gateway (``off``), every
  later turn sent to that deployment (``provider.only``) whatever happens;
- ``oracle``: each turn sent (``provider.only``) where the policy's score (time, and price at
  weight 0.3) is best, knowing each provider's current speed and what it holds cached;

and, for traffic without sessions, ``auto`` and ``off`` on single-turn conversations (8k–30k tokens).
Reported per mode: mean first token (client-side, request sent → first content chunk) and mean cost
per turn (from the usage each answer reports, at the deployment's prices).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import math
import os
import platform
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import openai

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior, FakeProvider
from tests.support.config import gateway_config
from tests.support.servers import ServerThread

PROVIDERS = {
    # name: (prefill tokens/s, base first token s, price_in, price_cached_in, price_out)
    "swift": (150_000.0, 0.02, 3.0, 0.3, 6.0),
    "steady": (80_000.0, 0.03, 1.5, 0.3, 3.0),
    "thrifty": (40_000.0, 0.04, 0.8, 0.2, 2.0),
}
MARKETS: dict[str, dict[str, tuple[float, float, float, float, float]]] = {
    # Cold speeds and prices far apart: one provider leads clearly until it degrades.
    "distinct": dict(PROVIDERS),
    # Two hosts near-equal on the score (the faster one dearer), a slow cheap one: scoring each turn alone
    # spreads a conversation over the two.
    "near-equal": {
        "swift": (150_000.0, 0.02, 2.0, 0.4, 4.0),
        "steady": (120_000.0, 0.025, 1.6, 0.32, 3.2),
        "thrifty": (40_000.0, 0.04, 0.8, 0.2, 2.0),
    },
}


def use_market(name: str) -> None:
    PROVIDERS.clear()
    PROVIDERS.update(MARKETS[name])


DEGRADED = "swift"
DEGRADE_S = 1.2
SYSTEM_TOKENS = 8_000
TURN_TOKENS = 2_500
MAX_TOKENS = 60_000
OUTPUT_TOKENS = 16
CONCURRENCY = 8
PRICE_WEIGHT = 0.3
RESULTS = Path(__file__).parent / "results" / "sessions.md"


@dataclass(frozen=True)
class Session:
    name: str
    turns: int
    topic: int
    at: int | None = None
    """Send every turn as this turn of the conversation (the unsessioned traffic: one long prompt each)."""

    def messages(self, turn: int) -> list[dict[str, Any]]:
        turn = self.at if self.at is not None else turn
        # ~4 bytes of JSON per token, as the fake counts them: ~8k tokens of system prompt, ~2.4k per turn.
        phrase = f"[{self.name}] You help with topic {self.topic}. "
        messages: list[dict[str, Any]] = [{"role": "system", "content": phrase * (SYSTEM_TOKENS * 4 // len(phrase))}]
        for i in range(turn + 1):
            messages.append({"role": "user", "content": f"question {i} of {self.name}: " + "word " * 600})
            if i < turn:
                messages.append({"role": "assistant", "content": f"answer {i}: " + "reply " * 1100})
        return messages


def workload(count: int, rng: random.Random) -> list[Session]:
    sessions = []
    for i in range(count):
        longest = (MAX_TOKENS - SYSTEM_TOKENS) // TURN_TOKENS
        sessions.append(Session(f"s{i}", rng.randint(5, min(20, longest)), i))
    return sessions


@dataclass
class Result:
    ttfts: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    failures: int = 0
    moves: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0

    def hit_ratio(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def mean_ttft(self) -> float:
        return sum(self.ttfts) / len(self.ttfts) if self.ttfts else math.nan

    def mean_cost(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs else math.nan


class Stack:
    """Three caching fakes and a gateway over them, on loopback threads."""

    def __init__(self, affinity: str) -> None:
        self.fakes: dict[str, FakeProvider] = {}
        self.servers: list[ServerThread] = []
        urls = []
        for name, (prefill, base, _, _, _) in PROVIDERS.items():
            behavior = FakeBehavior(
                ttft_s=base, output_tokens=OUTPUT_TOKENS, cache_prompts=4096, prefill_tokens_per_s=prefill
            )
            app = FakeProvider(name, behavior)
            server = ServerThread(app).start()
            self.fakes[name] = app
            self.servers.append(server)
            urls.append(_Upstream(name, server.url + "/v1"))
        self.config = self._config(urls, affinity)
        self.gateway = ServerThread(create_app(self.config, AppOptions(environ={}))).start()
        self.servers.append(self.gateway)
        self.base_url = self.gateway.url + "/v1"

    @staticmethod
    def _config(urls: list[_Upstream], affinity: str) -> GatewayConfig:
        deployments = {
            name: {"price_in": p_in, "price_cached_in": p_cached, "price_out": p_out}
            for name, (_, _, p_in, p_cached, p_out) in PROVIDERS.items()
        }
        return gateway_config(urls, base_policy={}, policy={"affinity": affinity}, deployments=deployments)

    def degrade(self) -> None:
        fake = self.fakes[DEGRADED]
        fake.behavior = fake.behavior.merged({"ttft_s": PROVIDERS[DEGRADED][1] + DEGRADE_S})

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


@dataclass(frozen=True)
class _Upstream:
    name: str
    base_url: str


class Oracle:
    """Knows each provider's speed now and what it holds cached; picks by the policy's score."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.cached: dict[tuple[str, str], int] = {}
        """(session, provider) → prompt tokens of that session's last turn there."""

    def choose(self, session: str, prompt: int) -> str:
        options = []
        for name, (prefill, _, p_in, p_cached, p_out) in PROVIDERS.items():
            base = self.stack.fakes[name].behavior.ttft_s
            cached = min(self.cached.get((session, name), 0), prompt)
            ttft = base + (prompt - cached) / prefill
            cost = ((prompt - cached) * p_in + cached * p_cached + OUTPUT_TOKENS * p_out) / 1e6
            options.append((math.log2(ttft) + PRICE_WEIGHT * math.log2(cost), name))
        return min(options)[1]

    def served(self, session: str, provider: str, prompt: int) -> None:
        self.cached[(session, provider)] = prompt


async def one_turn(
    client: openai.AsyncOpenAI, stack: Stack, session: Session, turn: int, headers: dict[str, str], only: str | None
) -> tuple[float, float, str, int, int]:
    body: dict[str, Any] = {"stream_options": {"include_usage": True}}
    if only is not None:
        body["provider"] = {"only": [only]}
    started = time.perf_counter()
    raw = await client.chat.completions.with_raw_response.create(
        model="m",
        messages=cast(Any, session.messages(turn)),
        stream=True,
        extra_headers=headers,
        extra_body=body,
    )
    first = None
    usage = None
    async for chunk in raw.parse():
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
        usage = chunk.usage or usage
    deployment = raw.headers["x-gateway-deployment"]
    _, _, p_in, p_cached, p_out = PROVIDERS[deployment]
    assert usage is not None and first is not None
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    cached = cached or 0
    cost = ((usage.prompt_tokens - cached) * p_in + cached * p_cached + usage.completion_tokens * p_out) / 1e6
    return first, cost, deployment, usage.prompt_tokens, cached


async def run(mode: str, sessions: list[Session]) -> Result:
    affinity = "auto" if mode in ("auto", "auto-unsessioned") else "off"
    stack = Stack(affinity)
    oracle = Oracle(stack)
    result = Result()
    total = sum(s.turns for s in sessions)
    done = 0
    degraded = False
    home: dict[str, str] = {}
    last: dict[str, str] = {}
    client = openai.AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=60)
    queue: asyncio.Queue[Session] = asyncio.Queue()
    for session in sessions:
        queue.put_nowait(session)

    async def worker() -> None:
        nonlocal done, degraded
        while not queue.empty():
            session = queue.get_nowait()
            for turn in range(session.turns):
                if not degraded and done >= total // 2:
                    degraded = True
                    stack.degrade()
                headers = {"x-session-id": session.name} if mode in ("auto", "off", "sticky", "oracle") else {}
                only = None
                if mode == "sticky" and session.name in home:
                    only = home[session.name]
                elif mode == "oracle":
                    prompt = len(str(session.messages(turn))) // 4
                    only = oracle.choose(session.name, prompt)
                try:
                    ttft, cost, deployment, prompt_tokens, cached = await one_turn(
                        client, stack, session, turn, headers, only
                    )
                except (openai.APIError, AssertionError):
                    result.failures += 1
                    continue
                finally:
                    done += 1
                home.setdefault(session.name, deployment)
                if session.name in last and last[session.name] != deployment:
                    result.moves += 1
                last[session.name] = deployment
                oracle.served(session.name, deployment, prompt_tokens)
                result.ttfts.append(ttft)
                result.prompt_tokens += prompt_tokens
                result.cached_tokens += cached
                result.costs.append(cost)

    try:
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    finally:
        await client.close()
        stack.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--markets", default="distinct,near-equal", help="comma-separated: " + ", ".join(MARKETS))
    args = parser.parse_args()
    sections = []
    started = time.perf_counter()
    for market in args.markets.split(","):
        use_market(market)
        rng = random.Random(args.seed)
        sessions = workload(args.sessions, rng)
        # Unsessioned traffic: conversations sent once each, at one turn's length (8k–30k tokens).
        unsessioned = [Session(f"u{i}", 1, 1000 + i, at=rng.randint(0, 9)) for i in range(args.sessions * 3)]
        results: dict[str, Result] = {}
        for mode in ("auto", "off", "sticky", "oracle"):
            results[mode] = asyncio.run(run(mode, sessions))
            print(f"{market:10s} {mode:18s} {_line(results[mode])}", flush=True)
        for mode in ("auto-unsessioned", "off-unsessioned"):
            results[mode] = asyncio.run(run(mode, unsessioned))
            print(f"{market:10s} {mode:18s} {_line(results[mode])}", flush=True)
        sections.append(_section(market, results, len(sessions), sum(s.turns for s in sessions)))
    elapsed = time.perf_counter() - started
    lines = [
        "# Sessions over caching providers (`benchmarks/sessions.py`)",
        "",
        f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()} "
        "(shared with other jobs: timings are noisy; ratios within the run are what count).",
        f"Command: `python -m benchmarks.sessions --sessions {args.sessions} --seed {args.seed} "
        f"--markets {args.markets}` ({CONCURRENCY} sessions at a time; {elapsed:.0f} s in all).",
        "",
    ]
    report = "\n".join(lines) + "\n" + "\n".join(sections)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report)
    print(report)


def _line(result: Result) -> str:
    return (
        f"turns {len(result.ttfts):4d}  mean TTFT {result.mean_ttft() * 1000:7.1f} ms  "
        f"mean cost {result.mean_cost() * 1e6:8.1f} µUSD  hit {result.hit_ratio():.0%}  "
        f"moves {result.moves:3d}  failures {result.failures}"
    )


def _objective(result: Result, oracle: Result) -> float:
    ttft = math.log2(result.mean_ttft() / oracle.mean_ttft())
    return ttft + PRICE_WEIGHT * math.log2(result.mean_cost() / oracle.mean_cost())


def _section(market: str, results: dict[str, Result], sessions: int, turns: int) -> str:
    oracle, off, auto = results["oracle"], results["off"], results["auto"]
    providers = "; ".join(
        f"{name} {prefill / 1000:g}k tok/s, {base * 1000:g} ms, ${p_in:g}/{p_cached:g}/{p_out:g}"
        for name, (prefill, base, p_in, p_cached, p_out) in PROVIDERS.items()
    )
    lines = [
        f"## Market `{market}`",
        "",
        f"{sessions} sessions, {turns} turns per mode. Providers (prefill, base first token, $ in/cached/out per 1M): "
        f"{providers}. {DEGRADED} gains {DEGRADE_S:g} s of first token halfway.",
        "",
        "| mode | turns | mean TTFT (ms) | mean cost per turn (µUSD) | cache hit ratio | session moves | failures |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, r in results.items():
        lines.append(
            f"| {mode} | {len(r.ttfts)} | {r.mean_ttft() * 1000:.1f} | {r.mean_cost() * 1e6:.1f} | "
            f"{r.hit_ratio():.0%} | {r.moves} | "
            f"{r.failures} |"
        )

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}"

    lines += [
        "",
        "Targets:",
        f"- auto vs oracle: TTFT ×{ratio(auto.mean_ttft(), oracle.mean_ttft())}, cost "
        f"×{ratio(auto.mean_cost(), oracle.mean_cost())} (target ≤ 1.10 each)",
        f"- auto vs off: TTFT ×{ratio(auto.mean_ttft(), off.mean_ttft())}, cost "
        f"×{ratio(auto.mean_cost(), off.mean_cost())} (target ≤ 0.70 each)",
        f"- the policy's own objective (log2 TTFT + {PRICE_WEIGHT} × log2 cost, which the oracle minimises): "
        f"auto {_objective(auto, oracle):+.2f}, off {_objective(off, oracle):+.2f}, sticky "
        f"{_objective(results['sticky'], oracle):+.2f} against the oracle (0 = as good; +0.14 ≈ 10% worse)",
        f"- without sessions, auto vs off: TTFT ×"
        f"{ratio(results['auto-unsessioned'].mean_ttft(), results['off-unsessioned'].mean_ttft())}, cost ×"
        f"{ratio(results['auto-unsessioned'].mean_cost(), results['off-unsessioned'].mean_cost())} "
        "(target: no worse, ≤ 1.0 within noise)",
        "",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
