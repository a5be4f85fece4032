"""One verdict per answer: ``valid``, or the first reason it is not.

A pure function of what the meter read of the answer (``gateway.reading.Reading``: its text, its
tool calls with their arguments, its stop reason, its token count) and of what the request asked
(``gateway.quality.expect.Expectation``). It runs once per answer, after the answer's last byte
has gone to the client, and never changes what the client got. In order:

1. ``truncated``: stopped by ``length`` well below the request's own limit (under ``TRUNCATED_SHARE`` of it);
   a request that set no limit is never called truncated (there is no limit to be well below).
2. ``empty``: no text and no tool call, with a stop that is not the limit or a filter.
3. ``tool_args_not_json`` / ``tool_args_schema``: a call's arguments do not parse, are not an object, name an
   undeclared tool, or break its declared schema (``gateway.quality.schema``: required keys, types, enums).
   Empty arguments read as ``{}`` (what a call with no parameters means).
4. ``wrong_stop``: tool calls with a plain ``stop``, or a tool stop with no call (APIs that state it).
5. ``json_invalid`` / ``json_schema``: a JSON-mode answer that does not parse, or breaks its schema.
6. ``degenerate``: the same ``DEGENERATE_N``-word sequence at least ``DEGENERATE_REPEATS`` times, with most of
   the answer's tail repeating what came before it: a loop.

An answer stopped by the request's own limit is not held to JSON or a tool's schema (the limit cut it),
but it can still be a loop (a loop usually runs to the limit).
"""

from __future__ import annotations

import json
from collections import Counter

from gateway.quality.expect import Expectation
from gateway.quality.schema import schema_problem
from gateway.reading import Reading
from gateway.samples import Validity

TRUNCATED_SHARE = 0.5
"""A length stop below this share of the request's limit is a truncation, not the limit."""
DEGENERATE_N = 4
"""Words per n-gram in the loop check."""
DEGENERATE_REPEATS = 8
"""The most frequent n-gram must occur at least this often ..."""
DEGENERATE_SHARE = 0.5
"""... and at least this share of the examined n-grams must repeat an earlier one."""
DEGENERATE_TAIL = 2048
"""Words examined, from the end (a loop runs to the end of the answer): bounds the check's cost."""
CHAR_GRAM = 8
"""Text with few spaces (Chinese, Japanese, a run of symbols) is read by characters, this many per n-gram."""


def judge(reading: Reading, expects: Expectation) -> Validity:
    """The verdict on one complete answer (see the module docstring for the order of the checks)."""
    calls = reading.calls
    stop = reading.stop
    # With tool calls the answer text holds their arguments too: only a call-free answer's text is content.
    text = "" if calls else reading.answer_text
    limit = expects.max_tokens
    if stop == "length" and limit is not None:
        tokens = reading.usage_completion_tokens
        if tokens is None:
            tokens = reading.output_tokens
        if tokens is not None and tokens < TRUNCATED_SHARE * limit:
            return "truncated"
    if not calls and not text.strip():
        return "valid" if stop in ("length", "filter") else "empty"
    if calls and stop != "length":
        for call in calls:
            problem = _call_problem(call.name, call.arguments, expects)
            if problem is not None:
                return problem
    if expects.tool_stop and stop is not None:
        if (calls and stop == "stop") or (not calls and stop == "tool"):
            return "wrong_stop"
    if expects.json_mode and not calls and stop != "length":
        try:
            value = json.loads(text)
        except ValueError:
            return "json_invalid"
        if expects.schema is not None and schema_problem(value, expects.schema) is not None:
            return "json_schema"
    if text and degenerate(text):
        return "degenerate"
    return "valid"


def _call_problem(name: str | None, arguments: str, expects: Expectation) -> Validity | None:
    raw = arguments.strip() or "{}"
    try:
        value = json.loads(raw)
    except ValueError:
        return "tool_args_not_json"
    if not isinstance(value, dict):
        return "tool_args_schema"
    if not expects.tools:
        return None  # nothing declared to hold it to (a tool the provider has of its own)
    if name is None or name not in expects.tools:
        return "tool_args_schema"
    return "tool_args_schema" if schema_problem(value, expects.tools[name]) is not None else None


def degenerate(text: str) -> bool:
    """Whether ``text`` ends in a loop: one n-gram ``DEGENERATE_REPEATS`` times or more, and at least
    ``DEGENERATE_SHARE`` of the (last ``DEGENERATE_TAIL``) n-grams seen before. Ordinary prose repeats few
    4-word sequences; a list or a table repeats its separators but not its words."""
    words: list[str] | str = text.split()
    n = DEGENERATE_N
    if len(text) > 20 * max(1, len(words)):
        words, n = text[-DEGENERATE_TAIL * 4 :], CHAR_GRAM
    else:
        words = words[-DEGENERATE_TAIL:]
    if len(words) - n + 1 < n * DEGENERATE_REPEATS:
        return False  # too short to call a loop (most answers): nothing built
    grams: list[object]
    if isinstance(words, list):
        grams = list(zip(*(words[i:] for i in range(n)), strict=False))  # the n-grams as tuples, built in C
    else:
        grams = [words[i : i + n] for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    # An n-gram seen before: every occurrence but the first of each distinct one.
    repeated = len(grams) - len(counts)
    return repeated >= DEGENERATE_SHARE * len(grams) and max(counts.values()) >= DEGENERATE_REPEATS
