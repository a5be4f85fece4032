"""The live leaderboard of a real gateway, on both backends: ``GET /v1/gateway/stats`` matches
the percentiles computed exactly from the very samples the gateway took (within 2%), and
``gateway stats`` prints it as a table, JSON or CSV, from the gateway or straight from Redis."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.asgi import lifespan
from gateway.leaderboard import TABLE_HEADER
from gateway.samples import Sample
from gateway.stats.snapshot import NEUTRAL_OUTCOMES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.servers import ServerThread

REQUESTS = 40

# Row field -> (metric values of a sample, quantile), per DESIGN.md's definitions.
FIELDS: dict[str, tuple[Callable[[Sample], float | None], float]] = {
    "ttft_p50_s": (lambda s: s.ttft_s, 0.50),
    "ttft_p95_s": (lambda s: s.ttft_s, 0.95),
    "ttft_p99_s": (lambda s: s.ttft_s, 0.99),
    "tokens_per_s_p50": (lambda s: s.tokens_per_s, 0.50),
    "tokens_per_s_p95_floor": (lambda s: s.tokens_per_s, 0.05),
    "tokens_per_s_p99_floor": (lambda s: s.tokens_per_s, 0.01),
    "e2e_p50_s": (lambda s: s.e2e_s if s.outcome == "ok" else None, 0.50),
    "e2e_p95_s": (lambda s: s.e2e_s if s.outcome == "ok" else None, 0.95),
    "e2e_p99_s": (lambda s: s.e2e_s if s.outcome == "ok" else None, 0.99),
}


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


@pytest.fixture(params=["memory", "redis"])
def measured_gateway(
    request: pytest.FixtureRequest, fakes: Fakes, start_gateway: Callable[..., Gateway], prefix: str
) -> Gateway:
    """A gateway after REQUESTS streamed answers: a flaky first provider sends a share of them on
    to a second one, so both deployments have samples, and failures count against the first."""
    flaky = fakes.start(
        "flaky",
        FakeBehavior(
            ttft_s=0.005,
            ttft_jitter=0.6,
            tokens_per_s=3000,
            tps_jitter=0.5,
            output_tokens=24,
            status=503,
            error_rate=0.3,
            seed=3,
        ),
    )
    steady = fakes.start(
        "steady",
        FakeBehavior(ttft_s=0.01, ttft_jitter=0.4, tokens_per_s=1500, tps_jitter=0.3, output_tokens=24, seed=4),
    )
    stats: dict[str, Any] = {"backend": request.param, "key_prefix": prefix, "window_s": 300}
    if request.param == "redis":
        stats |= {
            "redis_url": request.getfixturevalue("redis_server").url,
            "flush_interval_s": 0.05,
            "refresh_interval_s": 0.1,
        }
    gateway = start_gateway(gateway_config([flaky, steady], extra={"stats": stats}))
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    for i in range(REQUESTS):
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"question {i}"}], stream=True
        )
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    # The gateway records an attempt just after its last byte: the client may be a step ahead.
    deadline = time.monotonic() + 10
    while sum(s.outcome == "ok" for s in gateway.samples.samples) < REQUESTS:
        assert time.monotonic() < deadline, "the gateway did not record every answer"
        time.sleep(0.01)
    return gateway


def check_rows(rows: list[dict[str, Any]], samples: list[Sample]) -> None:
    by_deployment = {row["deployment"]: row for row in rows}
    assert set(by_deployment) == {"flaky", "steady"}
    for deployment, row in by_deployment.items():
        mine = [s for s in samples if s.deployment == deployment]
        assert row["samples"] == len(mine) > 0
        # A cancelled attempt (a hedge's loser, under load) or the request's own fault says nothing of the provider.
        judged = [s for s in mine if s.outcome not in NEUTRAL_OUTCOMES]
        assert row["success_rate"] == pytest.approx(sum(s.outcome == "ok" for s in judged) / len(judged))
        for name, (value_of, q) in FIELDS.items():
            values = [v for v in map(value_of, mine) if v is not None]
            assert row[name] == pytest.approx(exact(values, q), rel=0.02), (deployment, name)
        assert (row["price_in"], row["price_out"], row["in_flight"]) == (1.0, 2.0, 0)


def run_stats(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "stats", *args], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_leaderboard_matches_exact_percentiles(measured_gateway: Gateway, request: pytest.FixtureRequest) -> None:
    samples = list(measured_gateway.samples.samples)
    assert len([s for s in samples if s.outcome == "ok"]) == REQUESTS
    document = httpx.get(measured_gateway.url + "/v1/gateway/stats").json()
    assert document["store"]["degraded"] is False and document["window_s"] == 300
    check_rows(document["data"], samples)
    assert document["data"][0]["tokens_per_s_vs_fastest"] == 0.0

    # The same through `gateway stats`: table, JSON and CSV from the gateway, then from Redis.
    wide = run_stats("--url", measured_gateway.url, "--wide").splitlines()
    assert wide[0].startswith("window 300 s") and wide[1] == ""
    header = wide[2]
    assert [header.index(name) for name in TABLE_HEADER] == sorted(header.index(name) for name in TABLE_HEADER)
    assert sorted(line.split()[1] for line in wide[4:]) == ["flaky", "steady"]
    # The default fits a 100-column terminal: one block per model, the leaderboard's main columns.
    compact = run_stats("--url", measured_gateway.url).splitlines()
    assert compact[0] == wide[0] and max(len(line) for line in compact) <= 100
    assert compact[2] == "m" and compact[3].split()[:3] == ["Deployment", "Tok/s", "p50"]
    assert sorted(line.split()[0] for line in compact[5:]) == ["flaky", "steady"]

    document = json.loads(run_stats("--url", measured_gateway.url, "--json"))
    check_rows(document["data"], samples)
    speeds = [row["tokens_per_s_p50"] for row in document["data"]]
    assert speeds == sorted(speeds, reverse=True)

    rows = list(csv.DictReader(io.StringIO(run_stats("--url", measured_gateway.url, "--csv"))))
    assert [r["deployment"] for r in rows] == [r["deployment"] for r in document["data"]]
    assert [int(r["samples"]) for r in rows] == [r["samples"] for r in document["data"]]

    if "redis" in request.node.callspec.id:
        redis_url = request.getfixturevalue("redis_server").url
        prefix = request.getfixturevalue("prefix")
        shared = json.loads(run_stats("--redis", redis_url, "--prefix", prefix, "--window", "300", "--json"))
        assert shared["store"]["backend"] == "redis"
        check_rows([{**row, "price_in": 1.0, "price_out": 2.0} for row in shared["data"]], samples)


def test_stats_command_fails_clearly() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "stats", "--redis", "redis://:pw@127.0.0.1:1/0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("gateway: cannot read stats from redis://127.0.0.1:1/0")
    assert "pw" not in result.stderr.replace("gateway:", "")


def test_stats_need_a_client_key_when_keys_are_set(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    gateway = start_gateway(gateway_config([fakes.start("steady")]), environ={"GATEWAY_API_KEYS": "k1,k2"})
    refused = httpx.get(gateway.url + "/v1/gateway/stats")
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    accepted = httpx.get(gateway.url + "/v1/gateway/stats", headers={"authorization": "Bearer k2"})
    assert accepted.status_code == 200 and [r["samples"] for r in accepted.json()["data"]] == [0]
    assert json.loads(run_stats("--url", gateway.url, "--api-key", "k1", "--json"))["data"][0]["deployment"] == "steady"


def test_stats_with_no_samples_says_so(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    gateway = start_gateway(gateway_config([fakes.start("steady")]))
    printed = run_stats("--url", gateway.url)
    assert "steady" in printed and "no samples yet in the last 300 s" in printed
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "no samples yet" not in run_stats("--url", gateway.url)


def test_stats_into_a_reader_that_leaves_ends_quietly(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    # `gateway stats | head`: the reader is gone before the table is written.
    gateway = start_gateway(gateway_config([fakes.start("steady")]))
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "stats", "--url", gateway.url, "--wide"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    finally:
        os.close(write)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode == 1


def test_stats_and_spend_from_something_that_is_not_a_gateway_fail_in_one_line(
    test_servers: list[ServerThread],
) -> None:
    # `--url` pointing at the wrong port: a login page, another JSON API, a half-configured proxy. Each answers 200,
    # and each used to end in a KeyError or JSONDecodeError traceback.
    bodies = [b"<html>sign in</html>", b"[]", b'{"object": "list"}', b'{"object": "gateway.stats", "data": null}']
    for body in bodies:
        server = ServerThread(_Answers(body)).start()
        test_servers.append(server)
        for command in (["stats"], ["spend", "--admin-key", "admin"]):
            result = subprocess.run(
                [sys.executable, "-m", "gateway", *command, "--url", server.url],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert result.returncode == 1, (body, command, result.stdout)
            assert "Traceback" not in result.stderr, result.stderr
            assert result.stderr.strip().splitlines() == [
                f"gateway: {server.url} answered with something other than a gateway's {command[0]}: "
                "is it the gateway's address?"
            ]


class _Answers:
    """A loopback HTTP server that answers every request 200 with the same JSON-typed body."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": self.body})
