"""Benchmark prompts: the built-in set of short structured tasks, or a user's JSONL file.

Why short structured tasks (lookups, classifications, extractions): they are what most
production traffic to a fast model looks like, and their answers are short and stable at
temperature 0, so a benchmark compares serving speed rather than how much each model chose
to write. The built-in set (``gateway/data/bench_prompts.jsonl``) is in the very format a
user's file has: one chat request body per line, at least ``messages``; any other field
(tools, response_format, ...) is sent as is. ``model`` and ``stream`` are the benchmark's to
set, so they are dropped from each body.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

BUILTIN_PROMPTS = "data/bench_prompts.jsonl"
_OWNED_FIELDS = ("model", "stream")


class PromptsError(ValueError):
    """A prompts file that cannot be used; the message names the file and line."""


def parse_prompts(text: str, source: str) -> list[dict[str, Any]]:
    """Chat request bodies, one per non-blank line of ``text``."""
    bodies: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as exc:
            raise PromptsError(f"{source}:{number}: not valid JSON ({exc})") from exc
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            raise PromptsError(f'{source}:{number}: expected a chat request body with a non-empty "messages" array')
        bodies.append({key: value for key, value in body.items() if key not in _OWNED_FIELDS})
    if not bodies:
        raise PromptsError(f"{source}: no prompts (expected one JSON chat request body per line)")
    return bodies


def load_prompts(path: str | Path) -> list[dict[str, Any]]:
    """A user's JSONL file of chat request bodies."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptsError(f"{path}: cannot read prompts: {exc.strerror or exc}") from exc
    return parse_prompts(text, str(path))


def builtin_prompts() -> list[dict[str, Any]]:
    """The package's few dozen short structured tasks, kinds interleaved so any prefix mixes them."""
    text = resources.files("gateway").joinpath(BUILTIN_PROMPTS).read_text(encoding="utf-8")
    return parse_prompts(text, BUILTIN_PROMPTS)
