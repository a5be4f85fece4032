"""Benchmark prompts and the request body the benchmark sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.bench.runner import request_body
from gateway.prompts import PromptsError, builtin_prompts, load_prompts, parse_prompts


def test_the_built_in_set_holds_a_few_dozen_chat_bodies() -> None:
    prompts = builtin_prompts()
    assert 30 <= len(prompts) <= 60
    assert all(p["messages"][-1]["role"] == "user" for p in prompts)
    assert len({json.dumps(p) for p in prompts}) == len(prompts)


def test_a_user_file_is_read_line_by_line_with_errors_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}], "stream": false, "tools": []}\n\n')
    assert load_prompts(path) == [{"messages": [{"role": "user", "content": "hi"}], "tools": []}]
    with pytest.raises(PromptsError, match=r"x.jsonl:2: not valid JSON"):
        parse_prompts('{"messages": [{"role": "user", "content": "a"}]}\n{oops\n', "x.jsonl")
    with pytest.raises(PromptsError, match=r"x.jsonl:1: expected a chat request body"):
        parse_prompts('["not", "a", "body"]\n', "x.jsonl")
    with pytest.raises(PromptsError, match="no prompts"):
        parse_prompts("\n", "x.jsonl")
    with pytest.raises(PromptsError, match="cannot read prompts"):
        load_prompts(tmp_path / "missing.jsonl")


def test_the_request_body_streams_at_temperature_zero_under_the_ceiling() -> None:
    prompt = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.9, "seed": 1}
    body = json.loads(request_body(prompt, "upstream-id", 256))
    assert body == {**prompt, "model": "upstream-id", "stream": True, "temperature": 0, "max_tokens": 256}
    assert json.loads(request_body({**prompt, "max_tokens": 10}, "m", 256))["max_tokens"] == 10
    assert json.loads(request_body({**prompt, "max_tokens": 999}, "m", 256))["max_tokens"] == 256
    capped = json.loads(request_body({**prompt, "max_completion_tokens": 999}, "m", 256))
    assert capped["max_completion_tokens"] == 256 and "max_tokens" not in capped
