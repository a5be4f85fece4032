"""Conversations over caching providers: affinity against scoring each turn alone, stickiness and an oracle.

Run: ``python -m benchmarks.sessions [--sessions 24] [--seed 7] [--rounds 3]`` (~8 minutes; writes
``benchmarks/results/sessions.md``).

The scenario: sessions of 5–20 turns whose prompts grow from ~8k to ~60k tokens (a long system
prompt, then ~2.5k tokens per turn), 8 conversations at a time, over three fake providers that
cache prompt prefixes (``gateway.fakes.cache``) and whose cold prefill speeds and prices differ
(scaled down 50× from real ones, so a 60k-token cold prefill takes a second, not a minute), in two
markets (``PROVIDERS_OF``):

- ``distinct``: swift 150k tok/s at $3/0.3/6 per 1M (in/cached/out), steady 80k at $1.5/0.3/3,
  thrifty 40k at $0.8/0.2/2: one provider leads clearly on every request;
- ``near-equal``: swift 150k at $2/0.4/4 and steady 140k at $1.7/0.34/3.4 (near-equal on a cold
  prompt: within the policy's tie band, as two hosts of one open model often are), thrifty as above.

Halfway through each run ``swift`` degrades: its first token gains 1.2 s. Every mode gets fresh
providers (empty caches) and a fresh gateway (nothing measured), and the same turns in the same order:

- ``auto``: the gateway with ``affinity = "auto"`` (sessions named by ``x-session-id``);
- ``off``: the gateway with ``affinity = "off"`` (every turn scored alone);
- ``sticky``: blind stickiness: each session's first turn routed by the gateway (``off``), every
  later turn sent to that deployment (``provider.only``) whatever happens;
- ``oracle``: each turn sent (``provider.only``) where the policy's score (time, and price at
  weight 0.3) is best, knowing each provider's current speed and what it holds cached;
- ``round-robin`` (a reference, not a target): each turn sent (``provider.only``) to the next
  provider in turn, as a load balancer that knows nothing of caches scatters a conversation;

and, for traffic without sessions, ``auto`` and ``off`` on single-turn conversations (8k–30k tokens).
Reported per mode: mean first token (client-side, request sent → first content chunk) and mean cost
per turn (from the usage each answer reports, at the deployment's prices). The machine is shared and
noisy, so each of ``--rounds`` rounds (a workload seed each) runs every mode on the same turns, modes
in a rotated order; the report gives medians over the rounds with their ranges, and the ratios
between modes taken within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import math
import os
import platform
import random
import statistics
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

Market = dict[str, tuple[float, float, float, float, float]]
"""name → (prefill tokens/s, base first token s, price_in, price_cached_in, price_out)."""
PROVIDERS_OF: dict[str, Market] = {
    # Cold speeds and prices far apart: one provider leads clearly until it degrades.
    "distinct": {
        "swift": (150_000.0, 0.02, 3.0, 0.3, 6.0),
        "steady": (80_000.0, 0.03, 1.5, 0.3, 3.0),
        "thrifty": (40_000.0, 0.04, 0.8, 0.2, 2.0),
    },
    # Two hosts of one open model, as near in speed and price as such hosts often are: on a cold prompt
    # their scores are within the default tie band (steady 7% slower, 15% cheaper), and a slow cheap one.
    "near-equal": {
        "swift": (150_000.0, 0.02, 2.0, 0.4, 4.0),
        "steady": (140_000.0, 0.022, 1.7, 0.34, 3.4),
        "thrifty": (40_000.0, 0.04, 0.8, 0.2, 2.0),
    },
}
MARKET_NOTES = {
    "distinct": "Three providers whose cold speeds and prices are far apart: one leads clearly on every "
    "request until it degrades.",
    "near-equal": "Two hosts of one model near-equal on a cold prompt (within the policy's tie band: the "
    "second 7% slower to prefill and 15% cheaper), and a slow cheap one.",
}
MARKETS = tuple(PROVIDERS_OF)
PROVIDERS: Market = dict(PROVIDERS_OF["distinct"])
"""The market being run (``use_market``)."""


def use_market(name: str) -> None:
    PROVIDERS.clear()
    PROVIDERS.update(PROVIDERS_OF[name])


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
    placed: dict[tuple[str, str], int] = field(default_factory=dict)
    """(phase: before/after the degradation, provider) → turns served there."""
    phase_ttfts: dict[str, list[float]] = field(default_factory=dict)
    """Phase (before/after the degradation) → the first tokens of the turns sent in it."""

    def hit_ratio(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def mean_ttft(self) -> float:
        return sum(self.ttfts) / len(self.ttfts) if self.ttfts else math.nan

    def phase_ttft(self, phase: str) -> float:
        ttfts = self.phase_ttfts.get(phase, [])
        return sum(ttfts) / len(ttfts) if ttfts else math.nan

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
    names = list(PROVIDERS)
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
                headers = {"x-session-id": session.name} if mode in MODES else {}
                phase = "after" if degraded else "before"
                only = None
                if mode == "sticky" and session.name in home:
                    only = home[session.name]
                elif mode == "round-robin":
                    only = names[(session.topic + turn) % len(names)]
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
                result.phase_ttfts.setdefault(phase, []).append(ttft)
                result.placed[(phase, deployment)] = result.placed.get((phase, deployment), 0) + 1
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


MODES = ("auto", "off", "sticky", "oracle", "round-robin")
UNSESSIONED = ("auto-unsessioned", "off-unsessioned")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="rounds (seeds seed, seed+1, ...), modes interleaved")
    parser.add_argument("--markets", default="distinct,near-equal", help="comma-separated: " + ", ".join(MARKETS))
    args = parser.parse_args()
    markets = args.markets.split(",")
    results: dict[str, dict[str, list[Result]]] = {m: {mode: [] for mode in MODES + UNSESSIONED} for m in markets}
    turns: dict[str, list[int]] = {m: [] for m in markets}
    started = time.perf_counter()
    # A short unreported run first: the process's one-time costs (imports, the tokenizer's tables, the first
    # connections) would otherwise fall on the first mode of the first round.
    use_market(markets[0])
    asyncio.run(run("off", workload(4, random.Random(args.seed - 1))))
    for round_ in range(args.rounds):
        for market in markets:
            use_market(market)
            rng = random.Random(args.seed + round_)
            sessions = workload(args.sessions, rng)
            turns[market].append(sum(s.turns for s in sessions))
            # Unsessioned traffic: conversations sent once each, at one turn's length (8k–30k tokens).
            unsessioned = [Session(f"u{i}", 1, 1000 + i, at=rng.randint(0, 9)) for i in range(args.sessions * 3)]
            # Each round runs the modes in a rotated order, so a slow spell of the machine does not always
            # fall on the same one.
            shift = round_ % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                results[market][mode].append(asyncio.run(run(mode, sessions)))
                print(f"round {round_} {market:10s} {mode:18s} {_line(results[market][mode][-1])}", flush=True)
            for mode in UNSESSIONED[round_ % 2 :] + UNSESSIONED[: round_ % 2]:
                results[market][mode].append(asyncio.run(run(mode, unsessioned)))
                print(f"round {round_} {market:10s} {mode:18s} {_line(results[market][mode][-1])}", flush=True)
    elapsed = time.perf_counter() - started
    sections = [_section(m, results[m], args.sessions, turns[m]) for m in markets]
    lines = [
        "# Sessions over caching providers (`benchmarks/sessions.py`)",
        "",
        f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()} "
        "(shared with other jobs: timings are noisy; ratios within a round are what count).",
        f"Command: `python -m benchmarks.sessions --sessions {args.sessions} --seed {args.seed} "
        f"--rounds {args.rounds} --markets {args.markets}` ({CONCURRENCY} sessions at a time; {args.rounds} rounds "
        f"(workload seeds {args.seed}..{args.seed + args.rounds - 1}), each running every mode on the same turns, "
        f"modes interleaved; {elapsed:.0f} s in all). Figures are medians over the rounds, [min–max] beside them; "
        "ratios are taken within each round, then their median.",
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
        f"moves {result.moves:3d}  failures {result.failures}  "
        + " ".join(f"{phase[0]}:{name}={n}" for (phase, name), n in sorted(result.placed.items()))
    )


def _objective(result: Result, oracle: Result) -> float:
    ttft = math.log2(result.mean_ttft() / oracle.mean_ttft())
    return ttft + PRICE_WEIGHT * math.log2(result.mean_cost() / oracle.mean_cost())


def _median(values: list[float], fmt: str) -> str:
    """The median, and the range beside it when there is more than one value."""
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}–{format(max(values), fmt)}]"


def _placement(results: list[Result]) -> str:
    """Where the turns went before and after the degradation, summed over the rounds (shares of each phase)."""
    parts = []
    for phase in ("before", "after"):
        counts = {name: sum(r.placed.get((phase, name), 0) for r in results) for name in PROVIDERS}
        total = sum(counts.values())
        if total:
            parts.append(" ".join(f"{name[:2]} {100 * n / total:.0f}%" for name, n in counts.items() if n))
    return " / ".join(parts)


def _section(market: str, results: dict[str, list[Result]], sessions: int, turns: list[int]) -> str:
    providers = "; ".join(
        f"{name} {prefill / 1000:g}k tok/s, {base * 1000:g} ms, ${p_in:g}/{p_cached:g}/{p_out:g}"
        for name, (prefill, base, p_in, p_cached, p_out) in PROVIDERS_OF[market].items()
    )
    lines = [
        f"## Market `{market}`",
        "",
        f"{MARKET_NOTES[market]} Providers (prefill, base first token, $ in/cached/out per 1M): {providers}. "
        f"{DEGRADED} gains {DEGRADE_S:g} s of first token halfway through each run. {sessions} sessions per round "
        f"({', '.join(map(str, turns))} turns).",
        "",
        "| mode | mean TTFT (ms) | TTFT before / after the degradation (ms) | mean cost per turn (µUSD) "
        "| cache hit ratio | session moves | failures | turns before / after the degradation |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for mode, rs in results.items():
        lines.append(
            f"| {mode} | {_median([r.mean_ttft() * 1000 for r in rs], '.0f')} | "
            f"{_median([r.phase_ttft('before') * 1000 for r in rs], '.0f')} / "
            f"{_median([r.phase_ttft('after') * 1000 for r in rs], '.0f')} | "
            f"{_median([r.mean_cost() * 1e6 for r in rs], '.0f')} | "
            f"{_median([100 * r.hit_ratio() for r in rs], '.0f')}% | {_median([float(r.moves) for r in rs], '.0f')} | "
            f"{sum(r.failures for r in rs)} | {_placement(rs)} |"
        )

    def phase(a: str, b: str, name: str) -> str:
        pairs = zip(results[a], results[b], strict=True)
        return _median([x.phase_ttft(name) / y.phase_ttft(name) for x, y in pairs], ".2f")

    def ratios(a: str, b: str) -> tuple[str, str]:
        pairs = list(zip(results[a], results[b], strict=True))
        ttft = _median([x.mean_ttft() / y.mean_ttft() for x, y in pairs], ".2f")
        cost = _median([x.mean_cost() / y.mean_cost() for x, y in pairs], ".2f")
        return ttft, cost

    objective = {
        mode: _median([_objective(r, o) for r, o in zip(results[mode], results["oracle"], strict=True)], "+.2f")
        for mode in ("auto", "off", "sticky")
    }
    lines += [
        "",
        "Targets (ratios per round, median [range]):",
        "- auto vs oracle: TTFT ×{}, cost ×{} (target ≤ 1.10 each)".format(*ratios("auto", "oracle")),
        f"  - TTFT before the degradation ×{phase('auto', 'oracle', 'before')}, after it "
        f"×{phase('auto', 'oracle', 'after')}",
        "- auto vs off: TTFT ×{}, cost ×{} (target ≤ 0.70 each)".format(*ratios("auto", "off")),
        "- auto vs round-robin (a router that scatters each session's turns): TTFT ×{}, cost ×{}".format(
            *ratios("auto", "round-robin")
        ),
        "- sticky vs oracle: TTFT ×{}, cost ×{}; off vs oracle: TTFT ×{}, cost ×{}".format(
            *ratios("sticky", "oracle"), *ratios("off", "oracle")
        ),
        f"- the policy's own objective (log2 TTFT + {PRICE_WEIGHT} × log2 cost, which the oracle minimises turn "
        f"by turn): auto {objective['auto']}, off {objective['off']}, sticky {objective['sticky']} against the "
        "oracle (0 = as good; +0.14 ≈ 10% worse)",
        "- without sessions, auto vs off: TTFT ×{}, cost ×{} (target: no worse, ≤ 1.0 within noise)".format(
            *ratios("auto-unsessioned", "off-unsessioned")
        ),
        "",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
