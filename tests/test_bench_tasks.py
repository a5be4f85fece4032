"""``gateway bench --tasks``: exact-task accuracy per deployment beside its speed, on fakes of known accuracy.

The task file is the built-in tasks, each request telling the fake the right answer (``fake.reply``): a fake
without faults gets them all right, one whose tool calls always break gets the two tool tasks wrong (8/10), one
that answers 500 gets none and counts them as failures, in the denominator.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.bench.command import BenchOptions, run_bench_command
from gateway.bench.runner import BenchRunner, BenchSettings, BenchTarget
from gateway.bench.tasks import TaskError, builtin_tasks, load_tasks, normalized, parse_task
from gateway.dialects.base import ToolCall
from gateway.fakes import FakeBehavior
from gateway.reading import Reading
from gateway.samples import Endpoint
from gateway.tokens import load_token_counter
from tests.raw_upstream import RawUpstream
from tests.support.fakes import Fakes, FakeServer


def _reply(expect: dict[str, Any]) -> str:
    rubric, expected = next(iter(expect.items()))
    if rubric == "tool":
        return json.dumps(expected["arguments"])
    return json.dumps(expected) if rubric == "json" else str(expected)


def answered_tasks(path: Path) -> Path:
    """The built-in tasks, each request carrying its right answer for the fake."""
    lines = []
    for task in builtin_tasks():
        expect = {task.rubric: task.expected}
        request = {**task.request, "fake": {"reply": _reply(expect)}}
        lines.append(json.dumps({"name": task.name, "request": request, "expect": expect}))
    path.write_text("# the built-in tasks, answered\n" + "\n".join(lines) + "\n")
    return path


def _config(path: Path, servers: list[FakeServer]) -> Path:
    lines = ['[stats]\nbackend = "memory"\n']
    for server in servers:
        apis = 'apis = ["chat", "responses", "messages"]'
        lines.append(f'[[providers]]\nname = "{server.name}"\nbase_url = "{server.base_url}"\n{apis}\n')
    lines.append('[[models]]\nname = "m"\n')
    lines += [f'[[models.deployments]]\nprovider = "{s.name}"\nmodel = "{s.name}-id"\n' for s in servers]
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_bench_tasks_reports_known_accuracy_per_deployment(fakes: Fakes, tmp_path: Path, api: Endpoint) -> None:
    servers = [
        fakes.start("right", FakeBehavior(tokens_per_s=2000)),
        fakes.start("broken", FakeBehavior(tokens_per_s=2000, invalid_tool_json_rate=1.0, seed=1)),
        fakes.start("down", FakeBehavior(status=500)),
    ]
    config = _config(tmp_path / "config.toml", servers)
    tasks = answered_tasks(tmp_path / "tasks.jsonl")
    options = BenchOptions(
        config_path=str(config), tasks=True, tasks_path=str(tasks), settings=BenchSettings(timeout_s=10, api=api)
    )
    out = io.StringIO()
    assert run_bench_command(options, {}, out, io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Target"))
    rows = {line.split()[0]: line for line in lines[header + 2 :] if line.strip()}
    assert rows["m/right"].split()[1:3] == ["100.0%", "10/10"]
    assert rows["m/broken"].split()[1:3] == ["80.0%", "8/10"]
    assert "tool-weather, tool-weather-tokyo" in rows["m/broken"] and "tool_args_not_json" in rows["m/broken"]
    assert rows["m/down"].split()[1:4] == ["0.0%", "0/10", "10"]  # every failure in the denominator
    assert [line for line in lines if line.startswith("Target")] == [lines[header]]


def test_bench_tasks_from_the_command_line_with_the_built_in_set(fakes: Fakes, tmp_path: Path) -> None:
    """Against the plain fake the built-in tasks are all wrong (it answers its usual words): 0%, no failures."""
    server = fakes.start("words", FakeBehavior(tokens_per_s=2000))
    config = _config(tmp_path / "config.toml", [server])
    command = [sys.executable, "-m", "gateway", "bench", "-c", str(config), "--tasks"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "built-in tasks (10, exact rubrics)" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("m/words"))
    assert row.split()[1:4] == ["0.0%", "0/10", "0"]


def test_rubrics_and_task_files() -> None:
    tasks = {t.name: t for t in builtin_tasks()}
    assert tasks["add"].grade(Reading(answer_text=" 42.\n", stop="stop"))
    assert not tasks["add"].grade(Reading(answer_text="The answer is 42", stop="stop"))
    assert tasks["json-person"].grade(Reading(answer_text='{"age": 31, "name": "Ana"}'))
    assert not tasks["json-person"].grade(Reading(answer_text='{"name": "Ana", "age": "31"}'))
    call = ToolCall("get_weather", '{"city": "Paris"}')
    assert tasks["tool-weather"].grade(Reading(calls=(call,)))
    assert not tasks["tool-weather"].grade(Reading(calls=(ToolCall("get_weather", '{"city": "paris"}'),)))
    assert not tasks["tool-weather"].grade(Reading(answer_text="get_weather(Paris)"))
    assert normalized(' "Oslo". ') == "oslo"
    responses = tasks["tool-weather"].request_for("responses")
    assert responses["tools"][0]["name"] == "get_weather" and "function" not in responses["tools"][0]
    messages = tasks["json-person"].request_for("messages")
    assert messages["output_config"]["format"]["schema"]["required"] == ["name", "age"]
    assert "response_format" not in messages and "output_format" not in messages
    with pytest.raises(TaskError, match=r"t.jsonl:1: expect: expected one of"):
        parse_task({"name": "x", "request": {"messages": []}, "expect": {"text": "y"}}, "t.jsonl:1")
    with pytest.raises(TaskError, match="unknown keys answer"):
        parse_task({"name": "x", "request": {"messages": []}, "expect": {"answer": 1}, "answer": 2}, "t.jsonl:2")


def test_a_bad_task_file_fails_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "x", "request": {"messages": []}, "expect": {"answer": "1"}}\nnot json\n')
    with pytest.raises(TaskError, match=r"bad.jsonl:2: not JSON"):
        load_tasks(bad)
    err = io.StringIO()
    options = BenchOptions(url="http://127.0.0.1:9/v1", models=("m",), tasks=True, tasks_path=str(bad))
    sys_stderr, sys.stderr = sys.stderr, err
    try:
        assert run_bench_command(options, {}, io.StringIO(), io.StringIO()) == 1
    finally:
        sys.stderr = sys_stderr
    assert "bad.jsonl:2: not JSON" in err.getvalue()


def test_a_connection_closed_before_the_answer_is_asked_again_once_then_counted(fakes: Fakes) -> None:
    """A server that closes a pooled connection (llama.cpp's does between requests) gets the request again on a new
    one, once; one that resets every connection is still a failure, in the denominator."""
    upstream = RawUpstream("reset").start()
    try:
        target = BenchTarget(name="raw", kind="direct", base_url=upstream.base_url, routed_model="m")
        runner = BenchRunner([target], [], BenchSettings(requests=1, timeout_s=5), load_token_counter("o200k_base"),
                             tasks=builtin_tasks()[:1])  # fmt: skip
        (result,) = asyncio.run(runner.run())
    finally:
        upstream.stop()
    assert result.outcome == "upstream_error" and result.correct is False
    assert upstream.connections == 2
