"""``gateway bench`` against fake providers of known speed, on real loopback servers."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.bench import BenchRunner, BenchSettings, BenchTarget, RequestResult, samples_for_store, seed_store
from gateway.bench.command import BenchOptions, run_bench_command, targets_from_config, targets_from_gateway
from gateway.bench.report import TargetSummary, summarize
from gateway.config import StatsConfig, load_config
from gateway.fakes import FakeBehavior
from gateway.prompts import builtin_prompts
from gateway.stats import InMemoryStatsStore, StatsSnapshot, open_stats_store
from gateway.tokens import load_token_counter
from tests.redis_server import RedisServer, RedisServerMissing
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

QUICK = FakeBehavior(ttft_s=0.05, tokens_per_s=200, output_tokens=100)
SLOW = FakeBehavior(ttft_s=0.3, tokens_per_s=80, output_tokens=100)
ANSWER_TOKENS = 30
N = 6


def _run(targets: list[BenchTarget], settings: BenchSettings) -> list[RequestResult]:
    runner = BenchRunner(targets, builtin_prompts(), settings, load_token_counter("o200k_base"))
    return asyncio.run(runner.run())


def _by_target(summaries: list[TargetSummary]) -> dict[str, TargetSummary]:
    return {s.target: s for s in summaries}


def _within(value: float | None, low: float, high: float) -> bool:
    return value is not None and low <= value <= high


def test_bench_reports_known_speeds_and_keeps_failures_in_the_denominator(fakes: Fakes) -> None:
    servers = [
        fakes.start("quick", QUICK),
        fakes.start("slow", SLOW),
        fakes.start("flaky", FakeBehavior(ttft_s=0.05, tokens_per_s=200, status=503, error_rate=0.5, seed=3)),
        fakes.start("hang", FakeBehavior(hang_s=30)),
    ]
    config = gateway_config(servers)
    targets = targets_from_config(config, {})
    settings = BenchSettings(requests=N, concurrency=3, max_tokens=ANSWER_TOKENS, timeout_s=1.0)

    results = _run(targets, settings)
    summaries = summarize(targets, results)
    by = _by_target(summaries)

    assert len(results) == N * len(targets)
    assert [s.target for s in summaries][:2] == ["m/quick", "m/slow"], "sorted by tokens/s p50"
    # Known speeds: the fake paces tokens exactly; n tokens span n-1 intervals, hence the n/(n-1) bias.
    bias = ANSWER_TOKENS / (ANSWER_TOKENS - 1)
    quick, slow = by["m/quick"], by["m/slow"]
    assert _within(quick.tps_p50, 0.8 * 200, 1.05 * 200 * bias), quick
    assert _within(slow.tps_p50, 0.8 * 80, 1.05 * 80 * bias), slow
    # The median carries the known first token; the p95 of six is their worst, which a busy machine
    # (one slow connect) can stretch, so it is checked against the raw results rather than a bound.
    assert _within(quick.ttft_p50_s, 0.05, 0.05 + 0.25), quick
    assert _within(slow.ttft_p50_s, 0.3, 0.3 + 0.25), slow
    for summary in (quick, slow):
        ttfts = [r.ttft_s for r in results if r.target == summary.target and r.ttft_s is not None]
        assert summary.ttft_p95_s == max(ttfts), summary
    assert quick.success_rate == slow.success_rate == 1.0
    assert quick.delta_vs_fastest == 0.0
    assert slow.delta_vs_fastest is not None and -0.7 < slow.delta_vs_fastest < -0.5
    answered = [r for r in results if r.target == "m/quick"]
    assert all(r.output_tokens == ANSWER_TOKENS for r in answered)

    flaky = by["m/flaky"]
    flaky_results = [r for r in results if r.target == "m/flaky"]
    failures = sum(r.outcome != "ok" for r in flaky_results)
    assert 0 < failures < N, "the seeded 50% error rate should fail some, not all"
    assert flaky.requests == N and flaky.ok == N - failures
    assert flaky.success_rate == pytest.approx((N - failures) / N)
    assert flaky.tps_p99_floor == 0.0, "a failed request reached no speed"
    assert flaky.e2e_p99_s is None, "the p99 lands on a failure"
    assert all(r.outcome == "upstream_error" and r.status == 503 for r in flaky_results if r.outcome != "ok")

    hang = by["m/hang"]
    assert hang.requests == N and hang.success_rate == 0.0
    assert hang.tps_p50 == 0.0 and hang.ttft_p95_s is None and hang.e2e_p99_s is None
    assert {r.outcome for r in results if r.target == "m/hang"} == {"timeout"}


def test_bench_through_a_gateway_measures_what_it_serves(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    quick = fakes.start("quick", QUICK)
    gateway = start_gateway(gateway_config([quick]))
    targets = asyncio.run(targets_from_gateway(gateway.base_url, None))
    assert [t.name for t in targets] == ["gateway/m"]

    results = _run(targets, BenchSettings(requests=4, max_tokens=ANSWER_TOKENS, timeout_s=5.0))
    summary = summarize(targets, results)[0]

    assert summary.success_rate == 1.0
    assert _within(summary.tps_p50, 0.8 * 200, 1.05 * 200 * ANSWER_TOKENS / (ANSWER_TOKENS - 1))
    assert _within(summary.ttft_p50_s, 0.05, 0.05 + 0.25)
    assert summary.ttft_p95_s == max(r.ttft_s for r in results if r.ttft_s is not None)
    assert quick.app.state.requests == 4, "every benchmark request went through the gateway to the provider"


def test_bench_through_a_gateway_splits_results_by_the_provider_that_served(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    paced = {"ttft_s": 0.01, "tokens_per_s": 1000.0, "output_tokens": 20}
    flaky = fakes.start("flaky", FakeBehavior(**paced, status=503, error_rate=0.5, seed=1))  # type: ignore[arg-type]
    steady = fakes.start("steady", FakeBehavior(**paced))  # type: ignore[arg-type]
    # Config order, circuits that stay closed: every request tries flaky first, half fall back to steady.
    gateway = start_gateway(gateway_config([flaky, steady], policy={"failure_threshold": 100}))
    out, progress = io.StringIO(), io.StringIO()
    settings = BenchSettings(requests=8, concurrency=2, max_tokens=20, timeout_s=10.0)
    options = BenchOptions(url=gateway.base_url, settings=settings)
    assert run_bench_command(options, {}, out, progress) == 0
    text = out.getvalue()
    head = (
        "Through the gateway, by the provider that served each request (x-gateway-provider; one with fewer than 5 "
        "answers is not compared):"
    )
    assert head in text
    split = text.split(head)[1].splitlines()
    rows = {line.split()[0] + " " + line.split()[2]: line for line in split[3:] if line.strip()}
    assert set(rows) == {"gateway/m flaky", "gateway/m steady"}
    assert flaky.app.state.completed + steady.app.state.completed == 8
    for line in rows.values():  # what each served, it served whole, at its measured speed
        assert line.split()[-2] == "100.0" and 500 < float(line.split()[3]) < 1500, line
    assert sum(int(line.split()[-1]) for line in rows.values()) == 8  # each provider's share of the requests
    assert "gateway bench: 1 target x 8 requests" in text


def test_seeded_samples_land_in_the_stats_store(fakes: Fakes) -> None:
    servers = [fakes.start("quick", QUICK), fakes.start("down", FakeBehavior(status=503))]
    targets = targets_from_config(gateway_config(servers), {})
    results = _run(targets, BenchSettings(requests=3, max_tokens=10, timeout_s=5.0))
    samples = samples_for_store(targets, results)
    store = InMemoryStatsStore(StatsConfig())

    health = asyncio.run(seed_store(store, samples))

    assert not health.degraded and health.dropped_samples == 0

    snapshot = store.snapshot()
    quick, down = snapshot.get("m", "quick"), snapshot.get("m", "down")
    assert quick is not None and down is not None
    assert quick.outcomes == {"ok": 3} and down.outcomes == {"upstream_error": 3}
    assert quick.count("tokens_per_s") == 3
    ttft = quick.quantile("ttft_s", 0.5)
    assert ttft is not None and 0.05 <= ttft < 0.3
    assert all(s.provider in ("quick", "down") and s.stream and s.endpoint == "chat" for s in samples)
    assert all(s.cost_usd for s in samples if s.outcome == "ok")


def _write_config(path: Path, servers: list[FakeServer]) -> Path:
    lines = ['[stats]\nbackend = "memory"\n']
    for server in servers:
        lines.append(f'[[providers]]\nname = "{server.name}"\nbase_url = "{server.base_url}"\n')
    lines.append('[[models]]\nname = "m"\n')
    for server in servers:
        lines.append(
            f'[[models.deployments]]\nprovider = "{server.name}"\nmodel = "{server.name}-id"\nprice_out = 1.0\n'
        )
    path.write_text("\n".join(lines))
    return path


def test_bench_command_prints_the_table_writes_files_and_seeds(fakes: Fakes, tmp_path: Path) -> None:
    servers = [fakes.start("quick", QUICK), fakes.start("slow", SLOW)]
    config = _write_config(tmp_path / "config.toml", servers)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"messages": [{"role": "user", "content": "Capital of France?"}], "max_tokens": 999, "model": "x"}\n\n'
        '{"messages": [{"role": "user", "content": "Label: spam?"}], "response_format": {"type": "json_object"}}\n'
    )
    out = tmp_path / "results" / "run"
    command = [sys.executable, "-m", "gateway", "bench", "-c", str(config), "-n", "3", "--max-tokens", "12"]
    command += ["--prompts", str(prompts), "--out", str(out), "--seed-stats"]

    result = subprocess.run(command, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Target"))
    for column in ("Tokens/s p50", "Δ vs fastest", "Tokens/s p95 floor", "TTFT p95", "End-to-end p99", "Success %"):
        assert column in lines[header]
    assert lines[header + 2].startswith("m/quick") and lines[header + 3].startswith("m/slow")
    assert lines[header].split()[-1] == "Requests" and lines[header + 2].split()[-1] == "3"
    assert "seeded 6 samples into the memory stats store" in result.stdout

    document = json.loads(out.with_suffix(".json").read_text())
    assert document["method"]["max_tokens"] == 12 and document["method"]["temperature"] == 0
    assert [t["target"] for t in document["targets"]] == ["m/quick", "m/slow"]
    assert len(document["requests"]) == 6
    with out.with_suffix(".csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["target"] for row in rows] == ["m/quick", "m/slow"] and float(rows[0]["success_rate"]) == 1.0
    assert Path(f"{out}.requests.csv").read_text().count("\n") == 7

    sent = [r.body for r in servers[0].app.state.recorded]
    assert [b["messages"][0]["content"] for b in sent if b] == [
        "Capital of France?",
        "Label: spam?",
        "Capital of France?",
    ]
    for body in sent:
        assert body is not None
        assert body["model"] == "quick-id" and body["stream"] is True and body["temperature"] == 0
        assert body["max_tokens"] == 12
    assert sent[1] is not None and sent[1]["response_format"] == {"type": "json_object"}


def test_bench_command_fails_clearly_without_targets_or_with_a_bad_prompts_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    runs = [
        ([], "nothing to benchmark"),
        (["--url", "http://127.0.0.1:9/v1", "--model", "m", "--prompts", str(bad)], "bad.jsonl:1"),
        (["--url", "http://127.0.0.1:9/v1", "--seed-stats"], "--seed-stats needs -c CONFIG"),
    ]
    for args, message in runs:
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "bench", *args], capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 1, (args, result.stdout)
        assert message in result.stderr and "Traceback" not in result.stderr


def test_seed_stats_warms_a_redis_store_that_a_gateway_replica_then_reads(fakes: Fakes, tmp_path: Path) -> None:
    try:
        redis = RedisServer(tmp_path / "redis").start()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        servers = [fakes.start("quick", QUICK), fakes.start("down", FakeBehavior(status=503))]
        config_path = _write_config(tmp_path / "config.toml", servers)
        text = config_path.read_text().replace(
            '[stats]\nbackend = "memory"\n', f'[stats]\nbackend = "redis"\nredis_url = "{redis.url}"\n'
        )
        config_path.write_text(text)
        command = [sys.executable, "-m", "gateway", "bench", "-c", str(config_path), "-n", "4", "--max-tokens", "8"]

        result = subprocess.run([*command, "--seed-stats"], capture_output=True, text=True, timeout=60)

        assert result.returncode == 0, result.stderr
        assert "seeded 8 samples into the redis stats store" in result.stdout

        async def read_as_a_new_replica() -> StatsSnapshot:
            store = open_stats_store(load_config(config_path).stats)
            await store.start()
            try:
                return store.snapshot()
            finally:
                await store.aclose()

        snapshot = asyncio.run(read_as_a_new_replica())
        quick, down = snapshot.get("m", "quick"), snapshot.get("m", "down")
        assert quick is not None and quick.outcomes == {"ok": 4} and quick.count("tokens_per_s") == 4
        assert down is not None and down.outcomes == {"upstream_error": 4}
    finally:
        redis.stop()


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_bench_measures_a_responses_or_messages_deployment(fakes: Fakes, start_gateway: Any, api: str) -> None:
    """The same prompts in the API's own shape, measured by that API's dialect, direct and through a gateway."""
    quick = fakes.start("quick", QUICK)
    chat_only = fakes.start("chat-only", QUICK)
    config = gateway_config([quick, chat_only], provider_options={"quick": {"apis": [api]}})
    settings = BenchSettings(requests=3, max_tokens=ANSWER_TOKENS, timeout_s=5.0, api=api)  # type: ignore[arg-type]
    targets = targets_from_config(config, {}, api=api)  # type: ignore[arg-type]
    assert [t.name for t in targets] == ["m/quick"]  # only the deployment that speaks it
    gateway = start_gateway(config)
    targets += asyncio.run(targets_from_gateway(gateway.base_url, None, ["m"]))
    results = _run(targets, settings)
    assert [r.outcome for r in results] == ["ok"] * 6
    assert all(r.output_tokens == ANSWER_TOKENS and r.ttft_s is not None for r in results)
    sent = quick.app.state.recorded[0]
    assert sent.path == ("/v1/responses" if api == "responses" else "/v1/messages")
    limit = "max_output_tokens" if api == "responses" else "max_tokens"
    assert sent.body is not None and sent.body[limit] == ANSWER_TOKENS and sent.body["stream"] is True
    assert chat_only.app.state.requests == 0
