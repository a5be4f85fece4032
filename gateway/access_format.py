"""The access-log line's encoded shape: one JSON line per request, the keys in their order.

``EncodedLine`` is the line as msgspec encodes it (a struct's keys are encoded once, with its type); ``log_line``
encodes a dict the same way, for lines that carry bodies. Split from ``gateway.accesslog``, which takes each
request's facts and decides when its line is made.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gateway.samples import Endpoint, Sample

ENCODE = msgspec.json.Encoder().encode
"""``msgspec.json.encode`` without making its default encoder's look-up per line (the same bytes)."""


def log_line(entry: dict[str, Any]) -> str:
    """The entry as one JSON line: msgspec, a fraction of ``json.dumps``'s time (a line per request).

    A lone surrogate (a body logged with ``log_bodies`` may hold one) has no UTF-8 form: msgspec
    refuses it, and ``json.dumps`` keeps it escaped instead.
    """
    try:
        return ENCODE(entry).decode()
    except UnicodeEncodeError:
        return json.dumps(entry)


def entry_of(line: EncodedLine) -> dict[str, Any]:
    """An ``EncodedLine`` as a dict of the same keys (for ``json.dumps``, which writes what msgspec refuses, and for
    lines that add the bodies)."""
    entry = {name: getattr(line, name) for name in line.__struct_fields__}
    entry["attempt_costs"] = [
        {name: getattr(cost, name) for name in cost.__struct_fields__} for cost in line.attempt_costs
    ]
    if not line.keepalives:
        del entry["keepalives"]
    if line.provider_timings is None:
        del entry["provider_timings"]
    return entry


class EncodedAttemptCost(msgspec.Struct):
    """One entry of the line's ``attempt_costs`` (its keys, in their order)."""

    deployment: Any
    provider: Any
    outcome: Any
    validity: Any
    cost_usd: Any


class EncodedLine(msgspec.Struct, omit_defaults=True):
    """The line as msgspec encodes it: each field one of the line's keys, in its order (a struct is made and encoded
    in a fraction of a dict's time: its keys are encoded once, with the type). ``keepalives`` and
    ``provider_timings`` are left out at their defaults. Made with its batch (``AccessLog._encoded``); a line that
    carries the bodies (``log_bodies``) is its dict (``entry_of``) with two keys more."""

    ts: Any
    request_id: Any
    endpoint: Any
    api: Any
    upstream_api: Any
    omitted_tools: Any
    model: Any
    stream: Any
    status: Any
    outcome: Any
    validity: Any
    provider: Any
    deployment: Any
    attempts: Any
    route: Any
    ttft_s: Any
    first_answer_s: Any
    tokens_per_s: Any
    input_tokens: Any
    output_tokens: Any
    usage_source: Any
    cost_usd: Any
    key: Any
    team: Any
    attempt_costs: Any
    queue_wait_s: Any
    duration_s: Any
    overhead_s: Any
    keepalives: Any = 0
    provider_timings: Any = None


TakenFacts = tuple[
    float, str, Endpoint, Endpoint | None, list[str] | None, str | None, str | None, str | None, int, int | None,
    float, float | None, Sample | None, list[Sample], int, int | None, str | None, bool | None, float | None,
    dict[str, Any] | None, tuple[str | None, dict[str, Any] | None] | None,
]  # fmt: skip
"""``AccessLog._taken``: the wall-clock time, request id, endpoint, upstream API, omitted tools, route, key, team,
keep-alives, status, duration, overhead, winner, samples, said and counted tokens, model, stream, queue wait and
provider timings (these five None, the samples empty, when the request never passed validation), and with
``log_bodies`` the answer text and the request body (else None)."""
