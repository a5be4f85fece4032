"""The access log: one JSON line per request with the story of the request, and nothing secret."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import os
import random
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import openai
import pytest

from gateway.accesslog import AccessLog, AccessRecord, LineWriter, log_line, sole_writer
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.fakes import FakeBehavior
from gateway.metrics.series import Metrics
from gateway.relay import AttemptLog, ProxyRequest
from gateway.samples import Sample
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

CLIENT_KEY = "client-key-CANARY-7f3a"
PROVIDER_KEY = "sk-provider-CANARY-91bc"
PROMPT = "prompt-text-CANARY-5d2e"
FIELDS = {
    "ts", "request_id", "endpoint", "model", "stream", "status", "outcome", "provider", "deployment", "attempts",
    "route", "ttft_s", "first_answer_s", "tokens_per_s", "input_tokens", "output_tokens", "cost_usd", "duration_s",
    "overhead_s", "key", "team", "attempt_costs", "queue_wait_s", "api", "upstream_api", "validity",
    "omitted_tools", "usage_source",
}  # fmt: skip


def keyed_config(providers: list[FakeServer], server: dict[str, Any] | None = None) -> GatewayConfig:
    # Config order, so that the story (a failure, then a fallback) is the same every run.
    return gateway_config(
        providers,
        base_policy={"extends": "fixed-order"},
        deployments={p.name: {"model": "up"} for p in providers},
        provider_options={p.name: {"api_key_env": "FAKE_KEY"} for p in providers},
        extra={"server": server or {}},
    )


ENVIRON = {"FAKE_KEY": PROVIDER_KEY, "GATEWAY_API_KEYS": CLIENT_KEY}


def test_one_line_per_request_with_the_story_and_no_secrets(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    bad = fakes.start("bad", FakeBehavior(status=503))
    # Paced so that the first and last answer chunks never share one read, however busy the machine.
    good = fakes.start("good", FakeBehavior(output_tokens=8, tokens_per_s=50))
    gateway = start_gateway(keyed_config([bad, good]), environ=ENVIRON)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}], stream=True)
    answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": PROMPT}])
    wait_until(lambda: len(access_lines(caplog)) == 2)

    served, refused = access_lines(caplog)
    assert set(served) == FIELDS
    assert served["status"] == 200 and served["outcome"] == "ok" and served["stream"] is True
    assert (served["model"], served["provider"], served["deployment"]) == ("m", "good", "good")
    assert (served["api"], served["upstream_api"]) == ("chat", "chat") and refused["upstream_api"] is None
    assert served["attempts"] == 2 and served["route"] == "fallback"
    assert [(a["deployment"], a["outcome"], a["validity"]) for a in served["attempt_costs"]] == [
        ("bad", "upstream_error", None),  # a failure has no answer to judge
        ("good", "ok", "valid"),
    ]
    assert served["validity"] == "valid"
    assert served["attempt_costs"][1]["cost_usd"] == served["cost_usd"] and served["key"].startswith("k")
    assert served["output_tokens"] == 8 and served["input_tokens"] > 0
    assert served["ttft_s"] > 0 and served["tokens_per_s"] > 0 and served["cost_usd"] > 0
    assert served["duration_s"] >= served["ttft_s"] and 0 <= served["overhead_s"] <= served["duration_s"]
    assert len(served["request_id"]) == 32

    assert refused["status"] == 404 and refused["attempts"] == 0 and refused["model"] is None
    assert refused["provider"] is None and refused["overhead_s"] is None

    text = caplog.text + "".join(r.getMessage() for r in caplog.records)
    for secret in (CLIENT_KEY, PROVIDER_KEY, PROMPT, answer.strip()):
        assert secret not in text


def test_bodies_only_when_asked(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    good = fakes.start("good", FakeBehavior(output_tokens=5))
    gateway = start_gateway(keyed_config([good], {"log_bodies": True}), environ=ENVIRON)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}])
    wait_until(lambda: len(access_lines(caplog)) == 1)
    (line,) = access_lines(caplog)
    assert line["request_body"]["messages"][0]["content"] == PROMPT
    assert line["response_text"] == answer.choices[0].message.content
    # Even a debug log never holds a key: they travel in headers, which are never logged.
    assert CLIENT_KEY not in caplog.text and PROVIDER_KEY not in caplog.text


def test_access_log_can_be_turned_off_and_metrics_still_count(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    gateway = start_gateway(keyed_config([fakes.start("good")], {"access_log": False}), environ=ENVIRON)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    labels = {"model": "m", "provider": "good", "status_class": "2xx"}
    wait_until(lambda: gateway.metrics.registry.get_sample_value("gateway_requests_total", labels) == 1)
    assert access_lines(caplog) == []


def test_log_bodies_needs_the_access_log() -> None:
    with pytest.raises(ConfigError, match=r"server\.log_bodies: needs access_log = true"):
        parse_config(
            {"server": {"access_log": False, "log_bodies": True}, "providers": [], "models": []}, source="c.toml"
        )
    with pytest.raises(ConfigError, match=r"server\.access_log: expected true or false"):
        parse_config({"server": {"access_log": "yes"}}, source="c.toml")


def test_client_leaving_mid_stream_is_logged_and_leaves_nothing_in_flight(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    slow = fakes.start("slow", FakeBehavior(output_tokens=400, tokens_per_s=40))  # ten seconds of answer
    gateway = start_gateway(keyed_config([slow]), environ=ENVIRON)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    with (
        httpx.Client() as client,
        client.stream("POST", gateway.base_url + "/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        next(response.iter_bytes())  # the first token arrived: now hang up
    wait_until(lambda: len(access_lines(caplog)) == 1)
    (line,) = access_lines(caplog)
    assert line["status"] == 200 and line["outcome"] == "client_cancelled" and line["provider"] == "slow"
    inflight = gateway.metrics.registry.get_sample_value("gateway_inflight_requests", {"provider": "slow"})
    assert inflight == 0


def test_gateway_serve_writes_bare_json_lines_to_stdout(fakes: Fakes, tmp_path: Path) -> None:
    good = fakes.start("good", FakeBehavior(output_tokens=4))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[[providers]]\nname = "good"\nbase_url = "{good.base_url}"\n\n'
        '[[models]]\nname = "m"\n  [[models.deployments]]\n  provider = "good"\n  model = "up"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_API_KEYS"}
    command = [sys.executable, "-m", "gateway", "serve", "-c", str(config), "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz") or process.poll() is not None, timeout=30)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}]}
        assert httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body).status_code == 200
    finally:
        process.terminate()
        stdout, stderr = process.communicate(timeout=30)
    lines = [json.loads(line) for line in stdout.splitlines()]  # every stdout line is one JSON object
    assert [(line["status"], line["provider"]) for line in lines] == [(200, "good")]
    assert PROMPT not in stdout + stderr


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_line_with_a_lone_surrogate_is_still_written() -> None:
    # A logged body may hold "\ud800" (valid escaped JSON, no UTF-8 form): the line keeps it escaped.
    entry = {"request_id": "r1", "response_text": "a\ud800b", "status": 200}
    assert json.loads(log_line(entry)) == entry
    assert json.loads(log_line({"status": 200, "text": "é"})) == {"status": 200, "text": "é"}


def test_line_writer_batches_lines_and_loses_none_on_close() -> None:
    stream = io.StringIO()
    writer = LineWriter(stream)

    async def on_the_loop() -> None:
        writer.add('{"n":1}')
        writer.add('{"n":2}')
        assert stream.getvalue() == ""  # held for the batch
        writer.close()  # shutdown: what is pending is written
        assert stream.getvalue() == '{"n":1}\n{"n":2}\n'
        for n in range(writer.max_lines):
            writer.add(str(n))
        assert stream.getvalue().count("\n") == 2 + writer.max_lines  # a full batch goes at once

    asyncio.run(on_the_loop())
    writer.add("off the loop")  # nothing would run a later flush: written at once
    assert stream.getvalue().endswith("off the loop\n")


def test_access_log_hands_lines_to_a_sole_line_writer_else_to_the_logger() -> None:
    logger = logging.getLogger("gateway.access.test-writer")
    stream = io.StringIO()
    logger.handlers = [LineWriter(stream)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    assert sole_writer(logger) is logger.handlers[0]
    logger.propagate = True  # someone else listens too (caplog, an embedding app): through the logger
    assert sole_writer(logger) is None


def test_the_line_timestamp_is_datetimes_own_to_the_millisecond() -> None:
    # The second's text is cached; the milliseconds must still be datetime's: microseconds rounded half to even
    # (a carry into the next second included), then truncated.
    log = AccessLog(Metrics(process_metrics=False))
    rng = random.Random(5)
    instants = [rng.uniform(0.0, 4.1e9) for _ in range(20_000)]
    instants += sorted(rng.uniform(1.7649e9, 1.7649e9 + 3) for _ in range(20_000))  # many in one second
    for second in (0, 1_764_910_000, 1_767_225_599):  # the epoch, a day, a year's last second
        for fraction in (0.0, 5e-7, 1.5e-6, 0.0005, 0.1234565, 0.9994999, 0.9995, 0.9999994, 0.9999995, 0.99999999):
            instants.append(second + fraction)
    for at in instants:
        assert log.timestamp(at) == datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds"), repr(at)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_line_made_with_its_batch_is_the_line_of_the_request_as_it_ended() -> None:
    # Handed to a sole LineWriter, the line is made when its batch is written; by then a race's drained loser may
    # have added its sample to the trace (and had the prompt counted): the line must still be the one of the
    # request as it ended, the same as the logger's, made at once.
    answer = Sample(
        model="m", deployment="a", provider="pa", endpoint="chat", stream=True, outcome="ok", started_at=0.0,
        ttft_s=0.1234567, output_tokens=5, prompt_tokens_estimate=9, cost_usd=0.002, kind="plain", validity="valid",
    )  # fmt: skip
    loser = dataclasses.replace(answer, deployment="b", provider="pb", outcome="client_cancelled", hedged=True)
    request = ProxyRequest("r1", "chat", "/chat/completions", {"model": "m"}, True, "m", 0.0)
    request.trace.samples.append(answer)
    request.trace.queue_wait_s = 0.25
    record = AccessRecord("r1", "chat", 0.0, lambda: 1.5, request=request, log=AttemptLog(status=200))
    at = 1_764_910_000.4567

    at_once = _Lines()
    logger = logging.getLogger("gateway.access.test-at-once")
    logger.handlers, logger.propagate = [at_once], False
    logger.setLevel(logging.INFO)
    AccessLog(Metrics(process_metrics=False), logger=logger, wall_clock=lambda: at).write(record)

    stream = io.StringIO()
    batched = logging.getLogger("gateway.access.test-batched")
    batched.handlers, batched.propagate = [LineWriter(stream)], False
    batched.setLevel(logging.INFO)

    async def on_the_loop() -> None:
        AccessLog(Metrics(process_metrics=False), logger=batched, wall_clock=lambda: at).write(record)
        assert stream.getvalue() == ""  # not made yet
        request.trace.samples.append(loser)
        request.trace.prompt_tokens_counted = 77
        request.trace.queue_wait_s = 9.0
        batched.handlers[0].flush()

    asyncio.run(on_the_loop())
    assert stream.getvalue() == at_once.lines[0] + "\n"
    line = json.loads(at_once.lines[0])
    assert (line["deployment"], line["attempts"], line["input_tokens"], line["queue_wait_s"]) == ("a", 1, 9, 0.25)
    assert line["ts"] == "2025-12-05T04:46:40.456+00:00"


def test_a_line_that_cannot_be_made_loses_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    writer = LineWriter(stream)

    def broken() -> str:
        raise RuntimeError("no line")

    async def on_the_loop() -> None:
        writer.add('{"n":1}')
        writer.add(broken)
        writer.add(lambda: '{"n":3}')
        writer.flush()

    asyncio.run(on_the_loop())
    assert stream.getvalue() == '{"n":1}\n{"n":3}\n'
    assert "could not be made" in caplog.text


def test_the_lines_numbers_are_rounded_as_round_rounds_them() -> None:
    # The line's numbers rounded inline (no helper call per field), each as ``round(value, digits)`` of the value,
    # null where it was not measured; and the encoder kept for every line writes what ``msgspec.json.encode`` does.
    rng = random.Random(3)
    log = AccessLog(Metrics(process_metrics=False), wall_clock=lambda: 1_796_468_520.6114106)
    for i in range(300):
        request = ProxyRequest(f"r{i}", "chat", "/chat/completions", {"model": "m"}, True, "m", 0.0)
        samples = [
            Sample(
                model="m",
                deployment="d",
                provider="p",
                endpoint="chat",
                stream=True,
                outcome=rng.choice(["ok", "timeout"]),
                started_at=0.0,
                ttft_s=rng.choice([None, rng.expovariate(3.0), 1e-9]),
                first_answer_s=rng.choice([None, rng.random()]),
                tokens_per_s=rng.choice([None, rng.uniform(0, 1e5)]),
                cost_usd=rng.choice([None, 0.0, rng.random() / 1e3]),
            )  # fmt: skip
            for _ in range(rng.randint(0, 3))
        ]
        request.trace.samples.extend(samples)
        request.trace.queue_wait_s = rng.choice([0.0, rng.random()])
        record = AccessRecord(f"r{i}", "chat", 0.0, lambda: 0.0)
        record.request = request
        duration, overhead = rng.expovariate(10.0), rng.choice([None, rng.random() / 1e3])
        entry = log.entry(record, duration, overhead)
        winner = record.winner()

        def rounded(value: float | None, digits: int = 6) -> float | None:
            return None if value is None else round(value, digits)

        assert entry["ttft_s"] == rounded(winner.ttft_s if winner else None)
        assert entry["first_answer_s"] == rounded(winner.first_answer_s if winner else None)
        assert entry["tokens_per_s"] == rounded(winner.tokens_per_s if winner else None, 2)
        costs = [s.cost_usd for s in samples if s.cost_usd is not None]
        assert entry["cost_usd"] == (rounded(sum(costs), 10) if costs else None)
        assert [c["cost_usd"] for c in entry["attempt_costs"]] == [rounded(s.cost_usd, 10) for s in samples]
        assert (entry["queue_wait_s"], entry["duration_s"]) == (rounded(request.trace.queue_wait_s), rounded(duration))
        assert entry["overhead_s"] == rounded(overhead)
        assert log_line(entry) == msgspec.json.encode(entry).decode()


def _expected_entry(log: AccessLog, record: AccessRecord, duration: float, overhead: float | None) -> dict[str, Any]:
    """What the line says, worked out field by field from the record as the log's documentation says it."""
    request, winner = record.request, record.winner()
    samples = list(request.trace.samples) if request is not None else []
    said, counted = (request.trace.said_tokens, request.trace.prompt_tokens_counted) if request else (0, None)
    prompt = output = usage_source = None
    if winner is not None:
        # The provider's usage, else the gateway's own count; after a recovery the earlier parts are output.
        prompt = winner.usage_prompt_tokens
        usage_source = "provider" if prompt is not None and not said else "gateway_tokenizer"
        if prompt is None:
            prompt = counted if counted is not None else winner.prompt_tokens_estimate
        prompt = max(0, prompt - said) if prompt is not None else None
        output = winner.output_tokens + said if winner.output_tokens is not None else None

    def rounded(value: float | None, digits: int = 6) -> float | None:
        return None if value is None else round(value, digits)

    costs = [s.cost_usd for s in samples if s.cost_usd is not None]
    entry: dict[str, Any] = {
        "ts": log.timestamp(log.wall_clock()),
        "request_id": record.request_id,
        "endpoint": record.endpoint,
        "api": record.endpoint,
        "upstream_api": record.upstream_api(),
        "omitted_tools": record.omitted_tools(),
        "model": request.requested_model if request is not None else None,
        "stream": request.stream if request is not None else None,
        "status": record.status,
        # With no attempt, the client's hang-up when no response started (it left while queued, say).
        "outcome": winner.outcome if winner else ("client_cancelled" if record.status is None else None),
        "validity": winner.validity if winner else None,
        "provider": winner.provider if winner else None,
        "deployment": winner.deployment if winner else None,
        "attempts": len(samples),
        "route": record.log.route if record.log is not None else None,
        "ttft_s": rounded(winner.ttft_s if winner else None),
        "first_answer_s": rounded(winner.first_answer_s if winner else None),
        "tokens_per_s": rounded(winner.tokens_per_s if winner else None, 2),
        "input_tokens": prompt,
        "output_tokens": output,
        "usage_source": usage_source,
        "cost_usd": rounded(sum(costs), 10) if costs else None,
        "key": record.key_name,
        "team": record.team,
        "attempt_costs": [
            {
                "deployment": s.deployment,
                "provider": s.provider,
                "outcome": s.outcome,
                "validity": s.validity,
                "cost_usd": rounded(s.cost_usd, 10),
            }
            for s in samples
        ],  # fmt: skip
        "queue_wait_s": rounded(request.trace.queue_wait_s) if request is not None else None,
        "duration_s": rounded(duration),
        "overhead_s": rounded(overhead),
    }
    if record.keepalives:
        entry["keepalives"] = record.keepalives
    if request is not None and request.trace.provider_timings is not None:
        entry["provider_timings"] = request.trace.provider_timings
    if log.log_bodies and request is not None:
        entry["request_body"] = request.body
        entry["response_text"] = request.trace.answer_text
    return entry


@pytest.mark.parametrize("bodies", [False, True])
def test_the_line_says_each_field_as_documented_byte_for_byte(bodies: bool) -> None:
    # The line is encoded from a msgspec struct (with log_bodies: its dict and the bodies): over varied requests
    # (races, recoveries, keep-alives, provider timings, quotes, non-ASCII, a lone surrogate that sends the line
    # through json.dumps) it is the bytes of the documented fields' dict, worked out here on its own.
    rng = random.Random(4)
    log = AccessLog(Metrics(process_metrics=False), wall_clock=lambda: 1_796_468_520.6114106, log_bodies=bodies)
    for i in range(600):
        request = ProxyRequest(f"r{i}", "chat", "/chat/completions", {"model": "m"}, rng.random() < 0.5, "m\u00e9", 0.0)
        for _ in range(rng.randint(0, 3)):
            request.trace.samples.append(
                Sample(
                    model=rng.choice(["m", 'q"x']),
                    deployment=rng.choice("ab"),
                    provider="p",
                    endpoint="chat",
                    stream=True,
                    outcome=rng.choice(["ok", "timeout"]),
                    started_at=0.0,
                    ttft_s=rng.choice([None, rng.expovariate(3.0)]),
                    first_answer_s=rng.choice([None, rng.random()]),
                    tokens_per_s=rng.choice([None, rng.uniform(0, 1e5)]),
                    output_tokens=rng.choice([None, 5]),
                    usage_prompt_tokens=rng.choice([None, 20]),
                    prompt_tokens_estimate=rng.choice([None, 9]),
                    cost_usd=rng.choice([None, 0.0, rng.random() / 1e3]),
                    validity=rng.choice([None, "valid", "empty"]),
                )  # fmt: skip
            )
        trace = request.trace
        trace.queue_wait_s = rng.choice([0.0, rng.random()])
        trace.said_tokens, trace.prompt_tokens_counted = rng.choice([0, 7]), rng.choice([None, 33])
        trace.provider_timings = rng.choice([None, {}, {"queue": 0.1, "note": "\ud800" if i % 50 == 0 else "x"}])
        record = AccessRecord(f"r{i}\u2028", rng.choice(["chat", "responses"]), 0.0, lambda: 0.0)
        record.request = request if rng.random() < 0.9 else None
        record.log = rng.choice([None, AttemptLog(status=200, route="best-score")])
        record.error_status = rng.choice([None, 429])
        record.key_name, record.team = rng.choice([(None, None), ("alice", "t1")])
        record.keepalives = rng.choice([0, 3])
        request.trace.answer_text = rng.choice([None, "the answer \u00e9"])
        duration, overhead = rng.expovariate(10.0), rng.choice([None, rng.random()])
        args = (record, duration, overhead, record.winner(), record.status, record.upstream_api())
        assert log._made(log._taken(*args)) == log_line(_expected_entry(log, record, duration, overhead))
