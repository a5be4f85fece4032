"""Deterministic structured tasks with exact rubrics: ``gateway bench --tasks`` and the canary.

Each task is a chat request (sent at temperature 0) and one exact expectation:

- ``{"answer": "42"}``: the answer's text, trimmed, a trailing full stop dropped, compared without case;
- ``{"json": {...}}``: the answer parses as JSON equal to this value;
- ``{"tool": {"name": "get_weather", "arguments": {"city": "Paris"}}}``: the answer calls this tool with these
  arguments (parsed and compared as JSON), and nothing else first.

A task file is JSONL, one task per line: ``{"name": ..., "request": <chat request body>, "expect": <one of the
above>}`` (``docs/quality.md``). The request's ``tools`` and ``response_format`` are written in the chat shape and
carried to the Responses and Messages shapes when the benchmark speaks those APIs.

An answer that is not exactly right is wrong; a request that failed or timed out counts as wrong too (it stays in
the denominator, as the seed benchmark counts it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.reading import Reading
from gateway.samples import Endpoint

RUBRICS = ("answer", "json", "tool")


class TaskError(Exception):
    """A task file that cannot be read; the message names the file, the line and what was expected."""


@dataclass(frozen=True, slots=True)
class Task:
    """One task: its request (a chat body, no ``model``) and its exact expectation (one rubric)."""

    name: str
    request: Mapping[str, Any]
    rubric: str
    expected: Any

    def request_for(self, api: Endpoint) -> dict[str, Any]:
        """The request in ``api``'s shape but for its messages (``gateway.bench.runner.request_body`` does those)."""
        body = dict(self.request)
        tools = body.pop("tools", None)
        response_format = body.pop("response_format", None)
        if api == "chat":
            if tools is not None:
                body["tools"] = tools
            if response_format is not None:
                body["response_format"] = response_format
            return body
        functions = [t["function"] for t in tools or () if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        schema = _format_schema(response_format)
        if api == "responses":
            if functions:
                body["tools"] = [{"type": "function", **f} for f in functions]
            if isinstance(response_format, dict):
                kind = response_format.get("type")
                spec = {"type": "json_schema", "name": "answer", "schema": schema} if schema else {"type": kind}
                body["text"] = {"format": spec}
            return body
        if functions:
            body["tools"] = [
                {"name": f["name"], "description": f.get("description", ""), "input_schema": f.get("parameters", {})}
                for f in functions
            ]
        if schema:
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return body

    def grade(self, reading: Reading) -> bool:
        """Whether the answer is exactly right by this task's rubric."""
        if self.rubric == "tool":
            if not reading.calls:
                return False
            call = reading.calls[0]
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                return False
            return bool(call.name == self.expected.get("name") and arguments == self.expected.get("arguments"))
        if reading.calls:
            return False
        if self.rubric == "json":
            try:
                return bool(json.loads(reading.answer_text) == self.expected)
            except ValueError:
                return False
        return normalized(reading.answer_text) == normalized(str(self.expected))


def _format_schema(response_format: object) -> object:
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        return response_format["json_schema"].get("schema")
    return None


def normalized(text: str) -> str:
    """Trimmed, without a trailing full stop or wrapping quotes, compared without case."""
    text = text.strip().strip("`").strip()
    if text.endswith("."):
        text = text[:-1]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return text.strip().casefold()


def parse_task(data: object, where: str) -> Task:
    if not isinstance(data, dict):
        raise TaskError(f"{where}: expected a JSON object")
    name, request, expect = data.get("name"), data.get("request"), data.get("expect")
    unknown = set(data) - {"name", "request", "expect"}
    if unknown:
        raise TaskError(f"{where}: unknown keys {', '.join(sorted(unknown))} (known: name, request, expect)")
    if not isinstance(name, str) or not name:
        raise TaskError(f"{where}: name: expected a non-empty string")
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise TaskError(f"{where}: request: expected a chat request body with messages")
    if not isinstance(expect, dict) or len(expect) != 1 or next(iter(expect)) not in RUBRICS:
        raise TaskError(f"{where}: expect: expected one of {{'answer': ...}}, {{'json': ...}}, {{'tool': ...}}")
    rubric, expected = next(iter(expect.items()))
    if rubric == "tool" and not (isinstance(expected, dict) and isinstance(expected.get("name"), str)):
        raise TaskError(f"{where}: expect.tool: expected {{'name': ..., 'arguments': {{...}}}}")
    return Task(name, request, rubric, expected)


def load_tasks(path: str | Path) -> list[Task]:
    """The tasks of a JSONL file (blank lines and ``#`` comments skipped)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskError(f"{path}: cannot read: {exc.strerror}") from exc
    tasks = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise TaskError(f"{path}:{number}: not JSON ({exc})") from exc
        tasks.append(parse_task(data, f"{path}:{number}"))
    if not tasks:
        raise TaskError(f"{path}: no tasks")
    return tasks


def _ask(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def builtin_tasks() -> list[Task]:
    """Ten short tasks: extraction, classification, arithmetic, JSON-schema output and a tool call, two of each."""
    only = " Reply with the answer only."
    return [
        Task("extract-city", {"messages": _ask("Maria flew from Lisbon to Oslo. Which city did she fly to?" + only)},
             "answer", "Oslo"),
        Task("extract-year", {"messages": _ask("The bridge opened in 1937 after four years of work. In which year "
                                               "did it open?" + only)}, "answer", "1937"),
        Task("classify-sentiment", {"messages": _ask("Is the sentiment of 'I loved every minute of this film' "
                                                     "positive or negative?" + only)}, "answer", "positive"),
        Task("classify-fruit", {"messages": _ask("Is an apple a fruit or a vegetable?" + only)}, "answer", "fruit"),
        Task("add", {"messages": _ask("What is 17 + 25?" + only)}, "answer", "42"),
        Task("multiply", {"messages": _ask("What is 12 * 12?" + only)}, "answer", "144"),
        Task("json-person", {
            "messages": _ask("Ana is 31 years old. Return her name and age as a JSON object."),
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": _PERSON}},
        }, "json", {"name": "Ana", "age": 31}),
        Task("json-object", {
            "messages": _ask('Return the JSON object {"ok": true} and nothing else.'),
            "response_format": {"type": "json_object"},
        }, "json", {"ok": True}),
        Task("tool-weather", {"messages": _ask("What is the weather in Paris? Use the tool."), "tools": [_WEATHER]},
             "tool", {"name": "get_weather", "arguments": {"city": "Paris"}}),
        Task("tool-weather-tokyo", {"messages": _ask("Call get_weather for Tokyo."), "tools": [_WEATHER]},
             "tool", {"name": "get_weather", "arguments": {"city": "Tokyo"}}),
    ]  # fmt: skip
