"""A burst past the providers' capacity: does every request get its answer, and how long does it wait?

2,000 streamed requests arrive in 2 s (open loop, evenly spaced) at a model deployed on two fake
providers with 64 and 128 slots (``FakeBehavior.slots``), each answer paced at 50 tokens/s. The
gateway (``python -m gateway serve``, its own process) knows the slots as each provider's
``max_concurrency`` ceiling; what does not fit waits in its line (``queue_timeout_s``, default 5 s)
or overflows to the provider with room. Measured: failed requests, the queue wait per request (the
access log's ``queue_wait_s``) p50/p99, end-to-end p50/p99, and the peak concurrency each fake saw.

``--learn`` runs the same burst with no ceilings, the fakes refusing with 429 above their slots: the
gateway then learns each limit. ``--litellm-python`` runs the burst through LiteLLM's Router with
``max_parallel_requests`` set to the same slots (``benchmarks/litellm_burst_driver.py``, in
LiteLLM's own virtualenv). Results go to ``benchmarks/results/burst.md``.

    python -m benchmarks.burst --litellm-python /tmp/litellm-venv/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from benchmarks import procs
from benchmarks.figures import utc_minute
from benchmarks.procs import Server

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "burst.md"
LITELLM_DRIVER = HERE / "litellm_burst_driver.py"
SLOTS = {"small": 64, "large": 128}
DONE = b"data: [DONE]"


@dataclass(frozen=True)
class Burst:
    requests: int = 2000
    over_s: float = 2.0
    tokens: int = 20
    tokens_per_s: float = 50.0


@dataclass
class Result:
    name: str
    statuses: Counter[str] = field(default_factory=Counter)
    e2e_s: list[float] = field(default_factory=list)
    queue_wait_s: list[float] = field(default_factory=list)
    routes: Counter[str] = field(default_factory=Counter)
    peaks: dict[str, int] = field(default_factory=dict)
    learned: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each process used during the burst (the client, the fakes, the proxy)."""

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "ok")


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def _fakes(folder: Path, reject: bool) -> Iterator[dict[str, Server]]:
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, slots in SLOTS.items():
            port = procs.free_port()
            args = ["-m", "gateway", "fake-provider", "--port", str(port), "--name", name]
            args += ["--ttft", "0", "--tps", "50", "--tokens", "20"]
            server = stack.enter_context(procs.started(name, args, port, "/_fake/state", folder))
            behavior = {"slots": slots, "over_slots": "reject" if reject else "queue"}
            httpx.post(server.base_url.removesuffix("/v1") + "/_fake/behavior", json=behavior).raise_for_status()
            servers[name] = server
        yield servers


def _config(fakes: dict[str, Server], ceilings: bool, queue_timeout_s: float) -> str:
    providers = "".join(
        f'[[providers]]\nname = "{name}"\nbase_url = "{server.base_url}"\n'
        + (f"max_concurrency = {SLOTS[name]}\n" if ceilings else "")
        for name, server in fakes.items()
    )
    deployments = "".join(
        f'  [[models.deployments]]\n  provider = "{name}"\n  model = "fake-model"\n' for name in fakes
    )
    return (
        '[server]\naccess_log = true\n\n[stats]\nbackend = "memory"\n\n[limits]\nmax_in_flight = 8192\n\n'
        f'{providers}\n[[models]]\nname = "m"\npolicy = "burst"\n\n{deployments}\n'
        f"[policies.burst]\nqueue_timeout_s = {queue_timeout_s}\n"
    )


async def _drive(url: str, burst: Burst, result: Result) -> None:
    """The open-loop burst: request i starts at i × over_s / requests, whatever the others do."""
    body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "max_tokens": burst.tokens,
            "messages": [{"role": "user", "content": "burst"}],
            "fake": {"tokens_per_s": burst.tokens_per_s, "output_tokens": burst.tokens},
        }
    ).encode()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            started = time.monotonic()
            try:
                async with session.post(url, data=body, headers={"content-type": "application/json"}) as response:
                    seen = b""
                    async for chunk in response.content.iter_any():
                        seen = (seen + chunk)[-64:]
                    status = "ok" if response.status == 200 and DONE in seen else f"http {response.status}"
                    result.routes[response.headers.get("x-gateway-route", "refused")] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                status = type(exc).__name__
            result.statuses[status] += 1
            if status == "ok":
                result.e2e_s.append(time.monotonic() - started)

        begin = time.monotonic() + 0.2
        await asyncio.gather(*(one(begin + i * burst.over_s / burst.requests) for i in range(burst.requests)))
        result.wall_s = time.monotonic() - begin


def _peaks(fakes: dict[str, Server]) -> dict[str, int]:
    return {
        name: int(procs.get_json(server.base_url.removesuffix("/v1") + "/_fake/state")["max_in_flight"])
        for name, server in fakes.items()
    }


def run_gateway(burst: Burst, folder: Path, learn: bool, queue_timeout_s: float) -> Result:
    how = "no ceilings, limits learned from 429s" if learn else "max_concurrency = slots"
    result = Result(f"gateway, {how}, queue_timeout_s = {queue_timeout_s:g}")
    with (
        _fakes(folder, reject=learn) as fakes,
        procs.gateway(_config(fakes, not learn, queue_timeout_s), "gateway", folder) as gw,
    ):
        pids = {"gateway": gw.pid, **{name: s.pid for name, s in fakes.items()}}
        before = {name: procs.cpu_seconds(pid) for name, pid in pids.items()}
        client = resource.getrusage(resource.RUSAGE_SELF)
        asyncio.run(_drive(gw.chat_url, burst, result))
        after = resource.getrusage(resource.RUSAGE_SELF)
        result.cpu_s = {name: procs.cpu_seconds(pid) - before[name] for name, pid in pids.items()}
        result.cpu_s["client"] = after.ru_utime + after.ru_stime - client.ru_utime - client.ru_stime
        result.peaks = _peaks(fakes)
        metrics = httpx.get(gw.base_url.removesuffix("/v1") + "/metrics").text
        for line in metrics.splitlines():
            if line.startswith("gateway_provider_concurrency_limit{"):
                name = line.split('provider="', 1)[1].split('"', 1)[0]
                result.learned[name] = float(line.rsplit(" ", 1)[1])
        time.sleep(0.5)  # the last access-log lines are flushed
        for line in gw.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"queue_wait_s"' in line:
                wait = json.loads(line).get("queue_wait_s")
                if wait is not None:
                    result.queue_wait_s.append(wait)
    return result


def run_litellm(burst: Burst, folder: Path, python: str) -> Result:
    result = Result("LiteLLM Router, max_parallel_requests = slots")
    with _fakes(folder, reject=False) as fakes:
        before = {name: procs.cpu_seconds(s.pid) for name, s in fakes.items()}
        spec = {
            "providers": [{"name": n, "url": s.base_url, "max_parallel_requests": SLOTS[n]} for n, s in fakes.items()],
            **vars(burst),
        }
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [python, str(LITELLM_DRIVER)], input=json.dumps(spec).encode(), capture_output=True, timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(f"litellm driver failed: {done.stderr.decode()[-2000:]}")
        out = json.loads(done.stdout)
        result.statuses.update(out["statuses"])
        result.e2e_s = out["e2e_s"]
        result.wall_s = out["wall_s"]
        result.peaks = _peaks(fakes)
        result.cpu_s = {name: procs.cpu_seconds(s.pid) - before[name] for name, s in fakes.items()}
        ended = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = ended.ru_utime + ended.ru_stime - children.ru_utime - children.ru_stime
        result.cpu_s["LiteLLM (client and router)"] = used
    return result


def render(results: Sequence[Result], burst: Burst, command: str, notes: Sequence[str]) -> str:
    lines = [
        "# Bursts past capacity",
        "",
        f"Measured {utc_minute()} on {procs.machine()}.",
        "",
        f"Command: `{command}`.",
        "",
        f"{burst.requests:,} streamed requests arriving evenly over {burst.over_s:g} s (open loop) at one model on "
        f"two fake providers with {SLOTS['small']} and {SLOTS['large']} slots (`FakeBehavior.slots`), each answer "
        f"{burst.tokens} tokens paced at {burst.tokens_per_s:g} tokens/s; every process (client, fakes, proxy) on "
        "the same 2 shared cores. Queue wait: the access log's `queue_wait_s` of every request (0 for those "
        "that found a slot at once). Peak: the most requests each fake had at once.",
        "",
        "| run | ok | failed | queue wait p50 / p99 | end-to-end p50 / p99 | peak small / large | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ok = r.statuses.get("ok", 0)
        failed = ", ".join(f"{n} {s}" for s, n in r.statuses.items() if s != "ok") or "0"
        wait = (
            f"{_quantile(r.queue_wait_s, 0.5) * 1000:.0f} / {_quantile(r.queue_wait_s, 0.99) * 1000:.0f} ms"
            if r.queue_wait_s
            else "-"
        )
        e2e = f"{_quantile(r.e2e_s, 0.5):.2f} / {_quantile(r.e2e_s, 0.99):.2f} s" if r.e2e_s else "-"
        peak = f"{r.peaks.get('small', 0)} / {r.peaks.get('large', 0)}"
        lines.append(f"| {r.name} | {ok:,} | {failed} | {wait} | {e2e} | {peak} | {r.wall_s:.1f} s |")
    for r in results:
        if r.routes:
            routes = ", ".join(f"{route} {n}" for route, n in r.routes.most_common())
            lines.append(f"\n{r.name}: routes {routes}.")
        if r.learned:
            learned = ", ".join(f"{name} {limit:g}" for name, limit in sorted(r.learned.items()))
            lines.append(f"Learned limits at the end: {learned}.")
        if r.cpu_s:
            cpu = ", ".join(f"{name} {seconds:.1f}" for name, seconds in r.cpu_s.items())
            lines.append(f"CPU seconds during the burst: {cpu}.")
        if r.queue_wait_s:
            waited = sum(1 for w in r.queue_wait_s if w > 0)
            lines.append(
                f"{waited:,} requests waited for a slot; mean wait {statistics.fmean(r.queue_wait_s) * 1000:.0f} ms."
            )
    lines += ["", *notes, ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--over", type=float, default=2.0, help="seconds the requests arrive over")
    parser.add_argument("--learn", action="store_true", help="also run with no ceilings, the fakes refusing above")
    parser.add_argument(
        "--queue-timeout", type=float, action="append", help="the policy's queue_timeout_s (repeat: one run each)"
    )
    parser.add_argument(
        "--litellm-python", help="python of a virtualenv with litellm, to run the same burst through it"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--logs", type=Path, help="keep the processes' logs (access log included) in this folder")
    args = parser.parse_args(argv)
    burst = Burst(requests=args.requests, over_s=args.over)
    notes: list[str] = []
    results = []
    with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
        folder = Path(tmp) if args.logs is None else args.logs
        folder.mkdir(parents=True, exist_ok=True)
        for queue_timeout_s in args.queue_timeout or [5.0]:
            results.append(run_gateway(burst, folder, learn=False, queue_timeout_s=queue_timeout_s))
            if args.learn:
                results.append(run_gateway(burst, folder, learn=True, queue_timeout_s=queue_timeout_s))
        if args.litellm_python:
            try:
                results.append(run_litellm(burst, folder, args.litellm_python))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                notes.append(f"LiteLLM could not be run: {str(exc)[-500:]}")
        else:
            notes.append("LiteLLM not run (no --litellm-python).")
    command = "python -m benchmarks.burst " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(results, burst, command.strip(), notes)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
