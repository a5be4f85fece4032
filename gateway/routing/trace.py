"""A request's routing trace: who was considered, on which numbers, who was left out and why, and what each
attempt did (docs/how-it-routes.md, "Traced per request").

Sent as the ``x-gateway-trace`` header when asked for, and kept in a ``TraceStore`` to be read back through
``GET /v1/gateway/routes?request_id=<id>``, since a stream's headers leave before it ends. Every field of a
``Prediction`` and of its ``ScoreParts`` appears under its own name, so a field added to either shows up here.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from gateway.routing.apis import translated_to
from gateway.routing.plan import RoutePlan
from gateway.routing.ranking import BeliefView, Ranked, Ranking
from gateway.samples import Endpoint, Sample
from gateway.types import Clock

HEADER_LIMIT = 4096
"""Bytes of the header value: nginx's default line buffer, the smallest common limit on one header."""
TRACE_HEADER = "x-gateway-trace"


def _compact(value: object) -> object:
    if isinstance(value, float):
        return round(value, 6) if abs(value) < 1 else round(value, 4)
    return value


def _fields(obj: object) -> dict[str, Any]:
    """A dataclass's fields by name, leaving out those that say nothing (None, False, 0 terms)."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, field.name)
        if value is None or value is False or (isinstance(value, float) and value == 0.0):
            continue
        if isinstance(value, int | float | str | bool):
            out[field.name] = _compact(value)
    return out


def candidate_entry(rank: int, row: Ranked, role: str | None, api: Endpoint) -> dict[str, Any]:
    """One ranked deployment; ``via``: the API it is sent the request in when it is reached by translation."""
    entry: dict[str, Any] = {
        "rank": rank,
        "d": row.deployment.name,
        "p": row.provider.name,
        "status": row.status,
        "score": _compact(row.scored.score),
        "terms": _fields(row.scored.parts),
        "pred": _fields(row.scored.prediction),
        "price": [row.deployment.price_in, row.deployment.price_out],
        "load": [row.in_flight, row.provider_in_flight, row.limit],
    }
    if row.belief is not None:
        entry["belief"] = belief_entry(row.belief)
    if role is not None:
        entry["role"] = role
    translated = translated_to(row.deployment, api)
    if translated is not None:
        entry["via"] = translated
    if row.scored.violations:
        entry["broke"] = list(row.scored.violations)
    return entry


def belief_entry(belief: BeliefView) -> dict[str, Any]:
    """The belief behind a candidate: ``ttft`` and ``tps`` as [median, spread]; no ``age_s``: never heard."""
    entry: dict[str, Any] = {
        "ttft": [_compact(belief.ttft_s), _compact(belief.ttft_spread)],
        "tps": [_compact(belief.tokens_per_s), _compact(belief.tokens_per_s_spread)],
        "n": belief.answers,
        "best": _compact(belief.best),
    }
    if belief.age_s is not None:
        entry["age_s"] = _compact(belief.age_s)
    return entry


def _excluded_why(row: Ranked) -> dict[str, Any]:
    if row.circuit == "open":
        why = "rate limited" if row.rate_limited else "circuit open"
        return {"d": row.deployment.name, "p": row.provider.name, "why": why, "retry_in_s": round(row.retry_in_s, 2)}
    return {"d": row.deployment.name, "p": row.provider.name, "why": "at capacity"}


def attempt_entry(number: int, sample: Sample) -> dict[str, Any]:
    entry: dict[str, Any] = {"n": number, "d": sample.deployment, "p": sample.provider, "o": sample.outcome}
    if sample.status is not None:
        entry["st"] = sample.status
    if sample.ttft_s is not None:
        entry["ttft_s"] = _compact(sample.ttft_s)
    if sample.cost_usd is not None:
        entry["usd"] = round(sample.cost_usd, 9)
    if sample.hedged:
        entry["hedged"] = True
    if sample.validity is not None:
        entry["v"] = sample.validity  # the answer's verdict: valid, or why not
    return entry


def build_trace(
    request_id: str,
    plan: RoutePlan,
    samples: Sequence[Sample],
    answering: str | None = None,
    *,
    final: bool,
) -> dict[str, Any]:
    """The trace of one request: ``samples`` are its ended attempts; ``answering`` the deployment a stream is
    still answering from (its sample not yet recorded)."""
    trace: dict[str, Any] = {"v": 1, "id": request_id, "final": final}
    ranking = plan.ranking if isinstance(plan.ranking, Ranking) else None
    roles = {c.deployment.name: c.reason for c in plan.candidates}
    if ranking is not None:
        policy = ranking.policy
        shape = ranking.shape
        trace["model"] = ranking.model.name
        trace["policy"] = policy.name
        trace["q"] = {"ttft": policy.ttft_quantile, "tps": policy.tps_quantile, "estimate": policy.estimate}
        trace["shape"] = {"prompt": shape.prompt_tokens, "output": shape.output_tokens, "from": shape.output_source}
        if shape.kind is not None:
            trace["shape"]["kind"] = shape.kind
        order = {c.deployment.name: i for i, c in enumerate(plan.candidates)}
        # The plan's order first (exploration may have moved one ahead of the score), then the rest.
        rows = sorted(ranking.rows, key=lambda r: order.get(r.deployment.name, len(order)))
        trace["c"] = [
            candidate_entry(i, row, roles.get(row.deployment.name), shape.endpoint)
            for i, row in enumerate(rows, start=1)
            if row.deployment.name in roles
        ]
        excluded = [_excluded_why(row) for row in rows if row.deployment.name not in roles]
        ranked = {row.deployment.name for row in ranking.rows}
        excluded.extend(
            {"d": d.name, "p": d.provider, "why": "override"} for d in ranking.model.deployments if d.name not in ranked
        )
        if excluded:
            trace["x"] = excluded
    if plan.affinity is not None:
        affinity = plan.affinity
        trace["session"] = {"choice": affinity.choice, "bound": affinity.bound, "reason": affinity.reason}
    attempts = [attempt_entry(i, sample) for i, sample in enumerate(samples, start=1)]
    if answering is not None:
        attempts.append({"n": len(attempts) + 1, "d": answering, "o": "answering"})
    trace["a"] = attempts
    return trace


def _encode(trace: dict[str, Any]) -> str:
    return json.dumps(trace, separators=(",", ":"), ensure_ascii=True)


def header_value(trace: dict[str, Any], limit: int = HEADER_LIMIT) -> str:
    """The trace as one header value of at most ``limit`` bytes: the later candidates' numbers go first, then
    trailing candidates, the excluded, and the oldest attempts; a cut trace says ``"cut": true``. The first three
    candidates keep their numbers."""
    text = _encode(trace)
    if len(text) <= limit:
        return text
    cut = dict(trace, cut=True)
    candidates = [dict(c) for c in cut.get("c", [])]
    for entry in candidates[3:]:
        for numbers in ("pred", "terms", "belief"):
            entry.pop(numbers, None)
    cut["c"] = candidates
    text = _encode(cut)
    for part, kept in (("c", 1), ("x", 0), ("a", 1)):
        while len(text) > limit and len(cut.get(part, ())) > kept:
            cut[part] = cut[part][1:] if part == "a" else cut[part][:-1]
            text = _encode(cut)
    if len(text) > limit:
        text = _encode({"v": 1, "id": trace["id"], "final": trace["final"], "cut": True})
    return text


class TraceStore:
    """The traces asked for lately, by request id: the last ``limit``, for ``ttl_s`` each; per replica."""

    def __init__(self, limit: int = 1024, ttl_s: float = 600.0, clock: Clock = time.monotonic) -> None:
        self.limit = limit
        self.ttl_s = ttl_s
        self.clock = clock
        self._traces: OrderedDict[str, tuple[float, str, dict[str, Any]]] = OrderedDict()

    def put(self, request_id: str, key_id: str, trace: dict[str, Any]) -> None:
        self._traces[request_id] = (self.clock(), key_id, trace)
        self._traces.move_to_end(request_id)
        while len(self._traces) > self.limit:
            self._traces.popitem(last=False)

    def get(self, request_id: str) -> tuple[str, dict[str, Any]] | None:
        """(the key that made the request, its trace), or None once forgotten."""
        found = self._traces.get(request_id)
        if found is None:
            return None
        at, key_id, trace = found
        if self.clock() - at > self.ttl_s:
            del self._traces[request_id]
            return None
        return key_id, trace
