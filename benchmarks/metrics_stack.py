"""The compose stack without Docker, and what its metrics say; plus the cost of the metrics themselves.

Why: no Docker engine runs on the development machine, so this runs the same processes the
compose file does (the four simulated providers with their compose arguments, the gateway with
deploy/gateway.toml, the load generator) on loopback, then reads ``/metrics`` the way the
dashboard does: requests and success per provider, TTFT and tokens/s quantiles from the
histogram buckets (interpolated as PromQL's ``histogram_quantile`` does), routing share, the
gateway's own overhead. It also times ``Metrics.record`` per sample and one scrape.

    .venv/bin/python benchmarks/metrics_stack.py --duration 30
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics.series import Metrics
from gateway.samples import Sample

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
Series = dict[str, list[tuple[dict[str, str], float]]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http(url: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not come up")
        time.sleep(0.1)


def scrape(url: str) -> Series:
    series: Series = defaultdict(list)
    for family in text_string_to_metric_families(httpx.get(url).text):
        for sample in family.samples:
            series[sample.name].append((sample.labels, sample.value))
    return series


def total(series: Series, name: str, **match: str) -> float:
    return sum(v for labels, v in series.get(name, []) if all(labels.get(k) == m for k, m in match.items()))


def histogram_quantile(q: float, series: Series, name: str, **match: str) -> float | None:
    """PromQL's histogram_quantile over the summed buckets: linear interpolation within a bucket."""
    buckets: dict[float, float] = defaultdict(float)
    for labels, value in series.get(name + "_bucket", []):
        if all(labels.get(k) == m for k, m in match.items()):
            buckets[float(labels["le"])] += value
    if not buckets or buckets[math.inf] == 0:
        return None
    rank = q * buckets[math.inf]
    lower_bound, lower_count = 0.0, 0.0
    for bound in sorted(buckets):
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (buckets[bound] - lower_count)
        lower_bound, lower_count = bound, buckets[bound]
    return None


def run_stack(duration: float, rate: float) -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    config = (DEPLOY / "gateway.toml").read_text().replace('backend = "redis"', 'backend = "memory"')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEWAY_API_KEYS": "demo-key"}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name in ("fast", "steady", "cheap", "flaky"):
            port = free_port()
            args = list(compose["services"][name]["command"])
            args[args.index("--host") + 1], args[args.index("--port") + 1] = "127.0.0.1", str(port)
            processes.append(subprocess.Popen([sys.executable, "-m", "gateway", *args], env=env))
            config = config.replace(f"http://{name}:9001/v1", f"http://127.0.0.1:{port}/v1")
            wait_http(f"http://127.0.0.1:{port}/v1/models")
        gateway_port = free_port()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "gateway.toml"
            path.write_text(config)
            log = open(Path(tmp) / "access.log", "wb")  # closed below, before the folder goes
            command = [sys.executable, "-m", "gateway", "serve", "-c", str(path), "--port", str(gateway_port)]
            processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.DEVNULL))
            base = f"http://127.0.0.1:{gateway_port}"
            wait_http(base + "/healthz")
            loadgen = [sys.executable, str(DEPLOY / "loadgen.py"), "--base-url", base + "/v1", "--duration"]
            loadgen += [str(duration), "--rate", str(rate), "--concurrency", "32", "--seed", "7"]
            result = subprocess.run(loadgen, env=env, capture_output=True, text=True, timeout=duration + 180)
            print("loadgen:", result.stdout.strip().splitlines()[-1])
            series = scrape(base + "/metrics")
            log.close()
            lines = (Path(tmp) / "access.log").read_text().splitlines()
        report(series, len(lines))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(10)


def report(series: Series, access_lines: int) -> None:
    answered = total(series, "gateway_requests_total")
    print(f"client requests: {answered:.0f} (access-log lines: {access_lines})")
    decided = total(series, "gateway_routing_decisions_total")
    print(f"{'model':16} {'provider':8} {'attempts':>8} {'success':>8} {'share':>6} "
          f"{'ttft p50':>9} {'ttft p95':>9} {'tps p50':>8} {'tps p5':>7} {'e2e p99':>8}")  # fmt: skip
    for model in sorted({labels["model"] for labels, _ in series["gateway_upstream_requests_total"]}):
        rows = series["gateway_upstream_requests_total"]
        providers = {labels["provider"] for labels, _ in rows if labels["model"] == model}
        for provider in sorted(providers):
            m = {"model": model, "provider": provider}
            attempts = total(series, "gateway_upstream_requests_total", **m)
            ok = total(series, "gateway_upstream_requests_total", **m, outcome="ok")
            share = total(series, "gateway_routing_decisions_total", **m) / decided if decided else 0.0
            figures = [
                histogram_quantile(0.5, series, "gateway_ttft_seconds", **m),
                histogram_quantile(0.95, series, "gateway_ttft_seconds", **m),
                histogram_quantile(0.5, series, "gateway_tokens_per_second", **m),
                histogram_quantile(0.05, series, "gateway_tokens_per_second", **m),
                histogram_quantile(0.99, series, "gateway_end_to_end_seconds", **m),
            ]
            cells = ["-" if f is None else f"{f:.3g}" for f in figures]
            print(f"{model:16} {provider:8} {attempts:8.0f} {ok / attempts:8.1%} {share:6.1%} "
                  f"{cells[0]:>9} {cells[1]:>9} {cells[2]:>8} {cells[3]:>7} {cells[4]:>8}")  # fmt: skip
    for mode in ("stream", "full"):
        p50 = histogram_quantile(0.5, series, "gateway_overhead_seconds", mode=mode)
        p99 = histogram_quantile(0.99, series, "gateway_overhead_seconds", mode=mode)
        count = total(series, "gateway_overhead_seconds_count", mode=mode)
        if p50 is not None and p99 is not None:
            print(f"overhead {mode}: p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms over {count:.0f} requests")
    print(f"fallbacks: {total(series, 'gateway_fallbacks_total'):.0f}, "
          f"cost: ${total(series, 'gateway_cost_usd_total'):.4f}")  # fmt: skip


def time_metrics(samples: int = 100_000) -> None:
    """CPU cost of the Prometheus side: one ``record`` per attempt, one render per scrape."""
    metrics = Metrics()
    batch = [
        Sample(
            model=f"model-{i % 4}",
            deployment=f"p{i % 6}",
            provider=f"p{i % 6}",
            endpoint="chat",
            stream=True,
            outcome="ok",
            started_at=0.0,
            ttft_s=0.05 * (1 + i % 40),
            first_answer_s=0.06 * (1 + i % 40),
            tokens_per_s=10.0 * (1 + i % 90),
            e2e_s=0.5 * (1 + i % 30),
            output_tokens=50 + i % 500,
            usage_prompt_tokens=300,
            prompt_tokens_estimate=280,
            cost_usd=1e-4,
        )
        for i in range(1000)
    ]
    started = time.perf_counter()
    for i in range(samples):
        metrics.record(batch[i % len(batch)])
    per_sample = (time.perf_counter() - started) / samples
    started = time.perf_counter()
    renders = 50
    for _ in range(renders):
        body, _ = metrics.render()
    per_render = (time.perf_counter() - started) / renders
    families = len(re.findall(rb"^# TYPE ", body, re.MULTILINE))
    print(f"Metrics.record: {per_sample * 1e6:.1f} us per sample ({samples} samples, 4 models x 6 providers)")
    print(f"render: {per_render * 1000:.2f} ms per scrape, {len(body) / 1024:.0f} KiB, {families} families")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=8.0)
    args = parser.parse_args()
    time_metrics()
    run_stack(args.duration, args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
