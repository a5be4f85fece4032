"""Routing quality: the gateway's measured routing against an oracle and against round-robin.

Each scenario starts fake providers (one process each, shaped on the published figures in
``gateway/fakes/provider-profiles.csv``, times scaled down so that a run takes seconds) and one
gateway process in front of them, then sends the same request stream three ways:

- ``gateway``: the gateway's own routing (the scenario's policy, cold start included);
- ``oracle``: every request pinned (``provider.order``) to the provider that is truly best
  for it at that moment, computed from the fakes' known behaviour;
- ``round-robin``: every request pinned to the next provider in turn.

All three go through a fresh gateway with the same fakes and seeds, so gateway overhead and
fallback behaviour are the same; only the choice differs. Reported per scenario and strategy:
client-observed end-to-end time (mean, p95), failures, and cost per 1,000 requests.

Usage::

    python -m benchmarks.routing                  # all scenarios, writes benchmarks/results/routing.md
    python -m benchmarks.routing --only market --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(__file__).parent / "results" / "routing.md"
NOTES = """
Reading the figures:

- Runs of the same strategy differ by a few percent from one another (a 2-core machine shared
  by the fakes, the gateway and the client); the seeds are pooled to damp that.
- The gateway pays for what the oracle knows beforehand: its cold start measures every
  provider (the slow, heavy-tailed ones too: most of the market's p95 gap), and it keeps a
  small exploration share afterwards.
- In "market", baseten and modal are within a few percent of each other; modal's lower
  variance makes it the oracle's pick. Which one the gateway settles on depends on the seed.
- In "slowdown", the gateway notices within a few answers (its memory of each deployment's
  last answers); the oracle switches at the very request.
- In "flaky", a failed attempt costs an instant 503 and a fallback; the failure term of the
  score and the circuit's majority rule keep the fast provider in use.
"""
Z95 = 1.645


@dataclass(frozen=True)
class Profile:
    """A fake provider: medians and log-normal spreads of TTFT and tokens/s, a price, a failure rate."""

    name: str
    ttft_s: float
    tps: float
    price: float
    """USD per 1M tokens, prompt and output alike."""
    ttft_sigma: float = 0.3
    tps_sigma: float = 0.2
    error_rate: float = 0.0

    def expected_e2e(self, tokens: int) -> float:
        """The mean time of an answer of ``tokens`` tokens (log-normal means; a failure costs a retry elsewhere)."""
        ttft = self.ttft_s * math.exp(self.ttft_sigma**2 / 2)
        stream = (tokens - 1) / self.tps * math.exp(self.tps_sigma**2 / 2)
        return ttft + stream

    def behavior(self, scale: float) -> dict[str, Any]:
        return {
            "ttft_s": self.ttft_s * scale,
            "ttft_jitter": self.ttft_sigma,
            "tokens_per_s": self.tps / scale,
            "tps_jitter": self.tps_sigma,
            "output_tokens": 4000,
            "chunk_tokens": 2,
            "status": 503 if self.error_rate > 0 else 200,
            "error_rate": self.error_rate if self.error_rate > 0 else 1.0,
        }


def from_p95(
    name: str, tps_p50: float, tps_p95_floor: float, ttft_p50: float, ttft_p95: float, price: float
) -> Profile:
    """A profile from published percentiles.

    Log-normal spreads: sigma = ln(p50 / p5) / 1.645 for tokens/s, ln(p95 / p50) / 1.645 for TTFT.
    """
    return Profile(
        name,
        ttft_s=ttft_p50,
        tps=tps_p50,
        price=price,
        ttft_sigma=math.log(ttft_p95 / ttft_p50) / Z95,
        tps_sigma=math.log(tps_p50 / tps_p95_floor) / Z95,
    )


@dataclass(frozen=True)
class Change:
    """At request ``at`` (in send order), provider ``name`` starts behaving as ``profile``."""

    at: int
    name: str
    profile: Profile


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    providers: tuple[Profile, ...]
    token_mix: tuple[int, ...]
    """max_tokens of successive requests, cycled."""
    scale: float
    """Real seconds per profile second (profiles are in real-world seconds)."""
    policy: str = "balanced"
    slow_down: str | None = None
    """A provider that becomes 5x slower (TTFT and tokens/s) a third of the way through."""
    concurrency: int = 6

    def changes(self, requests: int) -> list[Change]:
        if self.slow_down is None:
            return []
        best = next(p for p in self.providers if p.name == self.slow_down)
        slowed = dataclasses.replace(best, ttft_s=best.ttft_s * 5, tps=best.tps / 5)
        return [Change(requests // 3, best.name, slowed)]


def _market() -> tuple[Profile, ...]:
    # Source A of provider-profiles.csv (one model, 10 providers); TTFT p50 is not published there,
    # so it is taken as p95 / 2.5. Prices: source B's medians where the provider appears, else near them.
    return (
        from_p95("nebius", 269.3, 78.8, 7.11 / 2.5, 7.11, 0.50),
        from_p95("baseten", 240.5, 61.6, 1.16 / 2.5, 1.16, 0.60),
        from_p95("modal", 222.2, 84.7, 1.09 / 2.5, 1.09, 0.55),
        from_p95("together", 151.6, 34.0, 2.26 / 2.5, 2.26, 0.534),
        from_p95("deepinfra", 69.4, 9.0, 6.41 / 2.5, 6.41, 0.37),
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "market",
        "five providers of one model shaped on source A (256-token answers, as in that benchmark)",
        _market(),
        token_mix=(256,),
        scale=0.1,
    ),
    Scenario(
        "short-vs-long",
        "a low-latency, slow-streaming provider and a high-latency, fast-streaming one; "
        "two 16-token answers to one of 1000",
        (
            Profile("snappy", ttft_s=0.4, tps=60.0, price=0.45),
            Profile("bulk", ttft_s=2.3, tps=270.0, price=0.45),
        ),
        token_mix=(16, 1000, 16),
        scale=0.05,
    ),
    Scenario(
        "equal-speed",
        "two providers with the same speed, one cheaper (source B: Parasail vs Together prices)",
        (
            Profile("together", ttft_s=0.45, tps=89.0, price=0.534),
            Profile("parasail", ttft_s=0.45, tps=89.0, price=0.29),
        ),
        token_mix=(128,),
        scale=0.1,
    ),
    Scenario(
        "slowdown",
        "the best of three providers becomes 5x slower a third of the way through",
        (
            Profile("baseten", ttft_s=0.46, tps=240.0, price=0.6),
            Profile("modal", ttft_s=0.6, tps=180.0, price=0.55),
            Profile("telnyx", ttft_s=0.8, tps=184.0, price=0.5),
        ),
        token_mix=(256,),
        scale=0.1,
        slow_down="baseten",
    ),
    Scenario(
        "flaky",
        "the fastest provider fails 30% of requests with 503 (each failure costs a fallback)",
        (
            Profile("fast-flaky", ttft_s=0.3, tps=250.0, price=0.5, error_rate=0.3),
            Profile("steady", ttft_s=0.6, tps=150.0, price=0.5),
            Profile("slow", ttft_s=1.5, tps=60.0, price=0.5),
        ),
        token_mix=(256,),
        scale=0.1,
    ),
)


# -- processes -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_ready(url: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=0.5).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


@dataclass
class Stack:
    """Fake providers and a gateway, each its own process (so that no GIL is shared)."""

    scenario: Scenario
    window_s: int
    fakes: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    gateway_url: str = ""
    workdir: tempfile.TemporaryDirectory[str] = field(default_factory=tempfile.TemporaryDirectory)

    def start(self, seed: int) -> None:
        for index, profile in enumerate(self.scenario.providers):
            port = _free_port()
            command = [sys.executable, "-m", "gateway", "fake-provider", "--name", profile.name, "--port", str(port)]
            command += ["--seed", str(seed * 100 + index)]
            self.processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.fakes[profile.name] = f"http://127.0.0.1:{port}"
        for profile in self.scenario.providers:
            url = self.fakes[profile.name]
            _wait_ready(url + "/_fake/state")
            self.set_behavior(profile)
        port = _free_port()
        config = Path(self.workdir.name) / "gateway.toml"
        config.write_text(self._config())
        env = dict(os.environ, GATEWAY_API_KEYS="", GATEWAY_ADMIN_KEY="bench-admin")
        self.processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway",
                    "serve",
                    "-c",
                    str(config),
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self.gateway_url = f"http://127.0.0.1:{port}"
        _wait_ready(self.gateway_url + "/healthz")

    def set_behavior(self, profile: Profile) -> None:
        response = httpx.post(self.fakes[profile.name] + "/_fake/behavior", json=profile.behavior(self.scenario.scale))
        response.raise_for_status()

    def _config(self) -> str:
        lines = [f"[stats]\nwindow_s = {self.window_s}\nslice_s = {max(1, self.window_s // 30)}\n"]
        for profile in self.scenario.providers:
            url = self.fakes[profile.name]
            lines.append(f'[[providers]]\nname = "{profile.name}"\nbase_url = "{url}/v1"\nmax_concurrency = 256\n')
        lines.append(f'[[models]]\nname = "m"\npolicy = "{self.scenario.policy}"\n')
        for profile in self.scenario.providers:
            lines.append(
                f'  [[models.deployments]]\n  provider = "{profile.name}"\n  model = "{profile.name}-m"\n'
                f"  price_in = {profile.price}\n  price_out = {profile.price}\n"
            )
        return "\n".join(lines)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(10)
        self.workdir.cleanup()


# -- the runs ------------------------------------------------------------------------------------

Chooser = Callable[[int, int, Sequence[Profile]], "str | None"]
"""(request index, max_tokens, current profiles) → provider to pin, or None to let the gateway choose."""


def oracle(index: int, tokens: int, profiles: Sequence[Profile]) -> str | None:
    """The provider with the lowest expected time for this request (a failure costs a fallback to the best other)."""

    def expected(p: Profile) -> float:
        others = [q.expected_e2e(tokens) for q in profiles if q is not p and q.error_rate == 0]
        fallback = min(others, default=p.expected_e2e(tokens))
        return (1 - p.error_rate) * p.expected_e2e(tokens) + p.error_rate * fallback

    return min(profiles, key=lambda p: (expected(p), p.price)).name


def round_robin(index: int, tokens: int, profiles: Sequence[Profile]) -> str | None:
    return profiles[index % len(profiles)].name


def measured(index: int, tokens: int, profiles: Sequence[Profile]) -> str | None:
    return None


@dataclass
class Result:
    e2e_s: list[float] = field(default_factory=list)
    failures: int = 0
    cost_usd: float = 0.0
    picks: dict[str, int] = field(default_factory=dict)
    by_provider: dict[str, list[float]] = field(default_factory=dict)

    def merge(self, other: Result) -> None:
        self.e2e_s += other.e2e_s
        self.failures += other.failures
        self.cost_usd += other.cost_usd
        for name, times in other.by_provider.items():
            self.by_provider.setdefault(name, []).extend(times)
            self.picks[name] = self.picks.get(name, 0) + len(times)


async def _run(stack: Stack, choose: Chooser, requests: int) -> Result:
    scenario = stack.scenario
    profiles = {p.name: p for p in scenario.providers}
    changes = scenario.changes(requests)
    result = Result()
    next_index = 0
    lock = asyncio.Lock()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_index
        while True:
            async with lock:
                index = next_index
                next_index += 1
                if index >= requests:
                    return
                while changes and changes[0].at <= index:
                    change = changes.pop(0)
                    profiles[change.name] = dataclasses.replace(change.profile, name=change.name)
                    await asyncio.to_thread(stack.set_behavior, profiles[change.name])
            tokens = scenario.token_mix[index % len(scenario.token_mix)]
            body: dict[str, Any] = {
                "model": "m",
                "messages": [{"role": "user", "content": f"request {index}: answer at length"}],
                "stream": True,
                "max_tokens": tokens,
            }
            pinned = choose(index, tokens, list(profiles.values()))
            if pinned is not None:
                body["provider"] = {"order": [pinned]}
            started = time.perf_counter()
            text: list[str] = []
            provider = "-"
            try:
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    provider = response.headers.get("x-gateway-provider", "-")
                    async for line in response.aiter_lines():
                        if line.startswith("data: {"):
                            event = json.loads(line[6:])
                            for choice in event.get("choices") or ():
                                text.append((choice.get("delta") or {}).get("content") or "")
                    ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            elapsed = time.perf_counter() - started
            if not ok:
                result.failures += 1
                continue
            result.e2e_s.append(elapsed)
            result.picks[provider] = result.picks.get(provider, 0) + 1
            result.by_provider.setdefault(provider, []).append(elapsed)
            price = profiles[provider].price if provider in profiles else 0.0
            output = len("".join(text).split())
            result.cost_usd += (len(json.dumps(body["messages"])) // 4 + output) * price / 1e6

    limits = httpx.Limits(max_connections=scenario.concurrency, max_keepalive_connections=scenario.concurrency)
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=120, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(scenario.concurrency)))
    return result


def run_scenario(scenario: Scenario, requests: int, window_s: int, seeds: Sequence[int]) -> dict[str, Result]:
    """Each strategy on a fresh stack per seed; results pooled over the seeds."""
    results = {name: Result() for name in ("gateway", "oracle", "round-robin")}
    for seed in seeds:
        for name, choose in (("gateway", measured), ("oracle", oracle), ("round-robin", round_robin)):
            stack = Stack(scenario, window_s)
            try:
                stack.start(seed)
                results[name].merge(asyncio.run(_run(stack, choose, requests)))
            finally:
                stack.stop()
    return results


# -- the report ----------------------------------------------------------------------------------


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] if ordered else float("nan")


def _row(scenario: Scenario, name: str, result: Result, oracle_mean: float) -> str:
    mean = statistics.fmean(result.e2e_s) if result.e2e_s else float("nan")
    picks = ", ".join(
        f"{k} {v} ({statistics.fmean(result.by_provider[k]):.3f})"
        for k, v in sorted(result.picks.items(), key=lambda kv: -kv[1])
    )
    n = max(1, len(result.e2e_s))
    return (
        f"| {scenario.name} | {name} | {mean:.3f} | {_p95(result.e2e_s):.3f} | {mean / oracle_mean - 1:+.1%} "
        f"| {result.failures} | {result.cost_usd / n * 1000:.4f} | {picks} |"
    )


def report(
    all_results: dict[Scenario, dict[str, Result]], requests: int, window_s: int, seeds: int, seconds: float
) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Routing benchmark: measured routing vs an oracle vs round-robin",
        "",
        f"- Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- Machine: {platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        f"- Command: `python -m benchmarks.routing --requests {requests} --window {window_s} --seeds {seeds}` "
        f"({seconds:.0f} s)",
        f"- {requests} streamed requests per scenario, strategy and seed ({seeds} seeds, pooled), 6 at a time;",
        f"  stats window {window_s} s. Each run starts cold: the gateway's numbers include its cold start",
        "  (every provider explored) and its ongoing exploration.",
        "- Times are client-observed end-to-end seconds (request sent → last byte), with the fakes' times",
        "  scaled down from the published figures (see each scenario's scale in `benchmarks/routing.py`).",
        "- vs oracle: mean end-to-end relative to the oracle's. Cost: USD per 1,000 requests. Picks:",
        "  requests served by each provider (their mean end-to-end in parentheses).",
        "",
        "| scenario | strategy | mean s | p95 s | vs oracle | failed | cost $/1k | picks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario, results in all_results.items():
        oracle_mean = statistics.fmean(results["oracle"].e2e_s)
        for name in ("gateway", "oracle", "round-robin"):
            lines.append(_row(scenario, name, results[name], oracle_mean))
    lines += ["", "Scenarios:", ""]
    for scenario in all_results:
        lines.append(f"- **{scenario.name}**: {scenario.description}.")
    return "\n".join(lines) + "\n" + NOTES


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--window", type=int, default=60, help="stats.window_s of the gateway under test")
    parser.add_argument("--seeds", type=int, default=2, help="runs per scenario and strategy (seeds 1..N), pooled")
    parser.add_argument("--only", action="append", help="run only these scenarios")
    parser.add_argument("--no-write", action="store_true", help="print the report without writing it")
    args = parser.parse_args(argv)
    scenarios = [s for s in SCENARIOS if not args.only or s.name in args.only]
    seeds = list(range(1, args.seeds + 1))
    started = time.perf_counter()
    all_results: dict[Scenario, dict[str, Result]] = {}
    for scenario in scenarios:
        print(f"running {scenario.name} ...", file=sys.stderr, flush=True)
        all_results[scenario] = run_scenario(scenario, args.requests, args.window, seeds)
    text = report(all_results, args.requests, args.window, len(seeds), time.perf_counter() - started)
    print(text)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
