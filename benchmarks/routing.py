"""Routing quality: the gateway's default routing against an oracle, round-robin and LiteLLM.

Each scenario (``benchmarks/routing_scenarios.py``) starts fake providers (one process each,
shaped on ``gateway/fakes/provider-profiles.csv``)
and a fresh gateway process in front of them with its defaults (the ``balanced`` policy, the
default stats window), then replays one Poisson schedule of streamed requests four ways:

- ``gateway``: the gateway's own routing, cold start included;
- ``oracle``: every request pinned (``provider.order``) to the provider that is truly best for
  it at that moment, computed from the fakes' known behaviour;
- ``round-robin``: every request pinned to the next provider in turn;
- ``litellm``: LiteLLM's ``latency-based-routing`` Router straight to the fakes (if LiteLLM is
  installed in a separate virtualenv, ``--litellm-python``; it is never a dependency here).

Reported per scenario and strategy (``benchmarks/routing_report.py``): mean end-to-end and its
regret against the oracle of the same run, the share of requests on the truly best provider
(and, after a change, from 15 s after it on), exploration, attempts per request, failures.

Usage::

    python -m benchmarks.routing                       # all scenarios, writes benchmarks/results/routing.md
    python -m benchmarks.routing --only recovery --strategies gateway,oracle
    python -m benchmarks.routing --gateway-src /tmp/main --label before --json /tmp/before.json --no-write
    python -m benchmarks.routing --before /tmp/before.json      # the report gains a before column
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.routing_report import Outcome, Run, load_runs, report, save_runs
from benchmarks.routing_scenarios import SCENARIOS, STRESS, Planned, Profile, Scenario, oracle_choice

RESULTS = Path(__file__).parent / "results" / "routing.md"
STRATEGIES = ("gateway", "oracle", "round-robin", "litellm")
ADMIN_KEY = "bench-admin"
LITELLM_DRIVER = Path(__file__).parent / "litellm_driver.py"


# -- processes -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_ready(url: str, deadline_s: float = 30.0) -> None:
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
    """Fake providers and (unless ``gateway=False``) a gateway, each its own process."""

    scenario: Scenario
    gateway_src: str | None = None
    fakes: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    gateway_url: str = ""
    workdir: tempfile.TemporaryDirectory[str] = field(default_factory=tempfile.TemporaryDirectory)

    def start(self, seed: int, gateway: bool = True) -> None:
        for index, profile in enumerate(self.scenario.providers):
            port = _free_port()
            command = [sys.executable, "-m", "gateway", "fake-provider", "--name", profile.name, "--port", str(port)]
            command += ["--seed", str(seed * 100 + index)]
            # The fakes are the apparatus, not what is measured: this tree's, whatever gateway runs.
            self.processes.append(self._popen(command, dict(os.environ), under_test=False))
            self.fakes[profile.name] = f"http://127.0.0.1:{port}"
        for profile in self.scenario.providers:
            _wait_ready(self.fakes[profile.name] + "/_fake/state")
            self.set_behavior(profile)
        if not gateway:
            return
        port = _free_port()
        config = Path(self.workdir.name) / "gateway.toml"
        config.write_text(self._config())
        env = dict(os.environ, GATEWAY_API_KEYS="", GATEWAY_ADMIN_KEY=ADMIN_KEY)
        command = [sys.executable, "-m", "gateway", "serve", "-c", str(config), "--port", str(port)]
        command += ["--log-level", "warning"]
        self.processes.append(self._popen(command, env))
        self.gateway_url = f"http://127.0.0.1:{port}"
        _wait_ready(self.gateway_url + "/healthz")

    def _popen(self, command: list[str], env: dict[str, str], under_test: bool = True) -> subprocess.Popen[bytes]:
        """A process of this stack; with ``gateway_src``, the gateway runs that tree's code (``-m`` puts the cwd
        first)."""
        source = self.gateway_src if under_test else None
        if source:
            env["PYTHONPATH"] = source
        cwd = source or None
        return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def set_behavior(self, profile: Profile) -> None:
        response = httpx.post(self.fakes[profile.name] + "/_fake/behavior", json=profile.behavior())
        response.raise_for_status()

    def _config(self) -> str:
        # Defaults everywhere (policy, stats window): the gateway a user starts.
        lines = ["[server]\naccess_log = false\n"]
        for profile in self.scenario.providers:
            url = self.fakes[profile.name]
            lines.append(f'[[providers]]\nname = "{profile.name}"\nbase_url = "{url}/v1"\nmax_concurrency = 512\n')
        lines.append('[[models]]\nname = "m"\n')
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
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.workdir.cleanup()


# -- one pass over the schedule ------------------------------------------------------------------


def _pin(strategy: str, planned: Planned, scenario: Scenario) -> str | None:
    if strategy == "oracle":
        return oracle_choice(planned.tokens, list(scenario.profiles_at(planned.at_s).values()))
    if strategy == "round-robin":
        return scenario.providers[planned.index % len(scenario.providers)].name
    return None


async def _changes(stack: Stack, started: float) -> None:
    for change in stack.scenario.changes:
        await asyncio.sleep(max(0.0, started + change.at_s - time.perf_counter()))
        profile = Profile(**{**asdict(change.profile), "name": change.name})
        await asyncio.to_thread(stack.set_behavior, profile)


async def _one(client: httpx.AsyncClient, stack: Stack, strategy: str, planned: Planned, out: Outcome) -> None:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": f"request {planned.index}: answer at length"}],
        "stream": True,
        "max_tokens": planned.tokens,
        # Common random numbers: request i draws the same first token, speed and failure on the same provider
        # under every strategy, so that a difference between strategies is their choices', not the draws'. Another
        # schedule (seed) draws anew: with the index alone, every seed replayed the same draws.
        "fake": {"draw_seed": planned.draw_seed},
    }
    pinned = _pin(strategy, planned, stack.scenario)
    if pinned is not None:
        body["provider"] = {"order": [pinned]}
    started = time.perf_counter()
    words = 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            out.provider = response.headers.get("x-gateway-provider", "-")
            out.route = response.headers.get("x-gateway-route", "-")
            out.attempts = int(response.headers.get("x-gateway-attempts", "0") or 0)
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    event = json.loads(line[6:])
                    for choice in event.get("choices") or ():
                        content = (choice.get("delta") or {}).get("content") or ""
                        if content and out.ttft_s is None:
                            out.ttft_s = time.perf_counter() - started
                        words += len(content.split())
            out.ok = response.status_code == 200 and words > 0
    except httpx.HTTPError:
        out.ok = False
    out.e2e_s = time.perf_counter() - started
    price = next((p.price for p in stack.scenario.providers if p.name == out.provider), 0.0)
    out.cost_usd = (len(json.dumps(body["messages"])) // 4 + words) * price / 1e6


async def _replay(stack: Stack, strategy: str, schedule: Sequence[Planned]) -> list[Outcome]:
    scenario = stack.scenario
    outcomes = [
        Outcome(p.index, p.at_s, p.tokens, oracle_choice(p.tokens, list(scenario.profiles_at(p.at_s).values())))
        for p in schedule
    ]
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    timeout = httpx.Timeout(180.0, connect=10.0)
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=timeout, limits=limits) as client:
        started = time.perf_counter()
        changer = asyncio.ensure_future(_changes(stack, started))
        tasks = []
        for planned, out in zip(schedule, outcomes, strict=True):
            await asyncio.sleep(max(0.0, started + planned.at_s - time.perf_counter()))
            tasks.append(asyncio.ensure_future(_one(client, stack, strategy, planned, out)))
        await asyncio.gather(*tasks)
        await changer
    return outcomes


def _probes(stack: Stack) -> int | None:
    """The gateway's own count of exploring requests, where it reports one."""
    try:
        response = httpx.get(
            stack.gateway_url + "/v1/gateway/routes",
            params={"model": "m"},
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
            timeout=10,
        )
        exploration = response.json()["data"][0].get("exploration")
    except (httpx.HTTPError, KeyError, IndexError, ValueError):
        return None
    return None if exploration is None else int(exploration["probes"])


def _litellm(stack: Stack, schedule: Sequence[Planned], python: str) -> list[Outcome]:
    """LiteLLM's latency-based Router, run by ``litellm_driver.py`` in LiteLLM's own virtualenv."""
    scenario = stack.scenario
    spec = {
        "providers": [{"name": p.name, "url": stack.fakes[p.name] + "/v1"} for p in scenario.providers],
        "requests": [asdict(p) for p in schedule],
        "changes": [
            {"at_s": c.at_s, "url": stack.fakes[c.name], "behavior": Profile(**asdict(c.profile)).behavior()}
            for c in scenario.changes
        ],
    }
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False")
    done = subprocess.run(
        [python, str(LITELLM_DRIVER)],
        input=json.dumps(spec).encode(),
        capture_output=True,
        env=env,
        timeout=scenario.duration_s + 300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"litellm driver failed: {done.stderr.decode()[-2000:]}")
    rows = {row["index"]: row for row in json.loads(done.stdout)}
    outcomes = []
    for p in schedule:
        best = oracle_choice(p.tokens, list(scenario.profiles_at(p.at_s).values()))
        row = rows.get(p.index, {})
        out = Outcome(p.index, p.at_s, p.tokens, best, ok=bool(row.get("ok")), e2e_s=row.get("e2e_s"))
        out.ttft_s, out.provider, out.attempts = row.get("ttft_s"), row.get("provider", "-"), 1
        price = next((q.price for q in scenario.providers if q.name == out.provider), 0.0)
        out.cost_usd = (10 + int(row.get("words", 0))) * price / 1e6
        outcomes.append(out)
    return outcomes


def run_scenario(
    scenario: Scenario, strategies: Sequence[str], seed: int, gateway_src: str | None, litellm_python: str | None
) -> list[Run]:
    """Each strategy on a fresh stack over the same schedule."""
    schedule = scenario.schedule(seed)
    runs = []
    for strategy in strategies:
        if strategy == "litellm" and litellm_python is None:
            continue
        stack = Stack(scenario, gateway_src)
        run = Run(scenario.name, strategy, seed)
        started = time.perf_counter()
        try:
            stack.start(seed, gateway=strategy != "litellm")
            if strategy == "litellm":
                assert litellm_python is not None
                run.outcomes = _litellm(stack, schedule, litellm_python)
            else:
                run.outcomes = asyncio.run(_replay(stack, strategy, schedule))
                if strategy == "gateway":
                    run.probes = _probes(stack)
        finally:
            stack.stop()
        run.seconds = time.perf_counter() - started
        print(f"  {scenario.name} / {strategy}: {run.seconds:.0f} s", file=sys.stderr, flush=True)
        runs.append(run)
    return runs


def _litellm_python(option: str | None) -> str | None:
    """The interpreter of a virtualenv where ``import litellm`` works, or None."""
    candidates = [option] if option else ["/work/litellm-venv/bin/python"]
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run(
                [python, "-c", "import litellm"],
                capture_output=True,
                env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"),
                timeout=120,
                check=False,
            )
            if probe.returncode == 0:
                return python
            print(f"litellm does not import with {python}: {probe.stderr.decode()[-300:]}", file=sys.stderr)
    return None


def chosen(only: Sequence[str] | None) -> list[Scenario]:
    """The scenarios ``--only`` names (every one of ``SCENARIOS`` without it): a stress market
    (``routing_scenarios.STRESS``, simulated by ``routing_simulate --stress``) runs in real time when named."""
    if not only:
        return list(SCENARIOS)
    known = (*SCENARIOS, *STRESS)
    unknown = sorted(set(only) - {s.name for s in known})
    if unknown:
        raise ValueError(f"no such scenario: {', '.join(unknown)}")
    return [s for s in known if s.name in only]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="run only these scenarios (a stress market too)")
    parser.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="comma-separated, of " + ", ".join(STRATEGIES)
    )
    parser.add_argument("--seeds", type=int, default=1, help="schedules per scenario (seeds 1..N)")
    parser.add_argument("--first-seed", type=int, default=1, help="start at this seed (more schedules beside a run's)")
    parser.add_argument("--max-duration", type=float, help="cut every scenario to this many seconds (smoke runs)")
    parser.add_argument("--gateway-src", help="run the gateway from this source tree (e.g. an export of main)")
    parser.add_argument("--litellm-python", help="python of a virtualenv with litellm (default: /work/litellm-venv)")
    parser.add_argument("--label", default="after", help="what this run measures (before/after)")
    parser.add_argument("--json", help="also save every request's outcome here")
    parser.add_argument("--before", help="a --json file of an earlier run, shown beside this one")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from --json")
    parser.add_argument("--no-write", action="store_true", help="print the report without writing it")
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    try:
        scenarios = chosen(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    if args.max_duration:
        scenarios = [dataclasses.replace(s, duration_s=min(s.duration_s, args.max_duration)) for s in scenarios]
    started = time.perf_counter()
    if args.report_only:
        runs = load_runs(args.json)
    else:
        litellm = _litellm_python(args.litellm_python) if "litellm" in strategies else None
        runs = []
        for scenario in scenarios:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                print(f"running {scenario.name} (seed {seed}) ...", file=sys.stderr, flush=True)
                runs += run_scenario(scenario, strategies, seed, args.gateway_src, litellm)
                if args.json:
                    save_runs(args.json, runs)
    before = load_runs(args.before) if args.before else None
    command = "python -m benchmarks.routing " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(runs, before, command=command, seconds=time.perf_counter() - started)
    print(text)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
