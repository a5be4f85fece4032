"""The per-request metric updates made in place (``gateway.metrics.children``) against the same updates made through
each child's ``inc``/``observe``/``dec``: the same scrape, the same errors.

``record``, ``request_done``, the in-flight and commit events and the spend counter add to plain values in their own
frame when every family they touch is plain. The reference is the same ``Metrics`` with ``plain_children`` answering
False everywhere: the former code, every update a method call. Both are fed the same random sequences (edge values:
bucket bounds exactly, 0, NaN, infinity, ints, negative amounts a counter refuses) and must render the same
Prometheus text and OpenMetrics at every checkpoint, ``_created`` aside, and raise the same errors.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import gateway.admission.spending.metrics as spend_metrics
import gateway.metrics.attempts as attempts
import gateway.metrics.children as children
import gateway.metrics.routing as routing
from gateway.admission.spending.store import Booking
from gateway.metrics.attempts import E2E_BUCKETS, OUTPUT_TOKEN_BUCKETS, OVERHEAD_BUCKETS, TPS_BUCKETS, TTFT_BUCKETS
from gateway.metrics.host import WorkerMetrics
from gateway.metrics.series import Metrics
from gateway.samples import Sample
from tests.test_metrics_plain import StockMetrics, config, rendered

EDGES = [*TTFT_BUCKETS, *E2E_BUCKETS, *TPS_BUCKETS, *OVERHEAD_BUCKETS, 0.0, math.inf, math.nan, 1e-9, 600.0]


@contextmanager
def by_calls() -> Iterator[None]:
    """Every family taken as not plain: each update through the child's methods (the code before this change)."""
    modules = (children, attempts, routing, spend_metrics)
    saved = [getattr(m, "plain_children") for m in modules]  # noqa: B009 (not every module declares it)
    for module in modules:
        setattr(module, "plain_children", lambda *families: False)  # noqa: B010
    try:
        yield
    finally:
        for module, original in zip(modules, saved, strict=True):
            setattr(module, "plain_children", original)  # noqa: B010


def value(rng: random.Random, scale: float) -> float | None:
    return rng.choice([None, rng.choice(EDGES), rng.expovariate(1 / scale), float(rng.randint(0, 3))])


def sample(rng: random.Random) -> Sample:
    outcome = rng.choice(["ok", "ok", "timeout", "upstream_error", "client_cancelled", "broken_stream"])
    return Sample(
        model=rng.choice(["m", "n"]),
        deployment=rng.choice(["a", "b", "b2"]),
        provider=rng.choice("abc"),
        endpoint=rng.choice(["chat", "responses", "messages"]),
        stream=rng.random() < 0.5,
        outcome=outcome,  # type: ignore[arg-type]
        started_at=0.0,
        ttft_s=value(rng, 0.5),
        first_answer_s=value(rng, 0.5),
        tokens_per_s=value(rng, 300.0),
        e2e_s=value(rng, 10.0),
        output_tokens=rng.choice([None, 0, 1, rng.choice(OUTPUT_TOKEN_BUCKETS), rng.randint(1, 20_000)]),
        usage_prompt_tokens=rng.choice([None, 0, rng.randint(1, 900)]),
        usage_completion_tokens=rng.choice([None, 0, rng.randint(0, 900)]),
        prompt_tokens_estimate=rng.choice([None, 0, rng.randint(0, 50)]),
        cost_usd=rng.choice([None, 0.0, rng.random() / 1000, math.nan, math.inf]),
        hedged=rng.random() < 0.2,
        attempt_s=rng.choice([None, rng.expovariate(1.0)]),
        kind=rng.choice([None, "plain", "tools"]),
        validity=rng.choice([None, "valid", "valid", "empty", "truncated"]),
    )


Operation = tuple[str, tuple[Any, ...]]
"""A method of ``Metrics`` (``spend.booked`` as ``booked``) and its arguments."""


def operations(seed: int, count: int) -> list[Operation]:
    """``count`` random updates, every value drawn when the list is built."""
    rng = random.Random(seed)
    ops: list[Operation] = []
    for _ in range(count):
        kind = rng.randrange(6)
        if kind <= 1:
            ops.append(("record", (sample(rng),)))
        elif kind == 2:
            args = (
                rng.choice(["m", ""]),
                rng.choice(["a", "b", ""]),
                rng.choice(["chat", "messages"]),
                rng.choice(["chat", None]),
                rng.choice([200, 429, 502, None]),
                rng.choice(["stream", "full", None]),
                rng.choice([None, -0.001, math.nan, rng.choice(OVERHEAD_BUCKETS), rng.expovariate(1000.0)]),
            )
            ops.append(("request_done", args))
        elif kind == 3:
            name = rng.choice(["attempt_started", "attempt_started", "attempt_ended"])
            ops.append((name, ("m", "d", rng.choice("abc"))))
        elif kind == 4:
            reason = rng.choice(["best-score", "only-candidate", "session"])
            ops.append(("committed", (rng.choice("mn"), "d", rng.choice("ab"), reason)))
        else:
            costs = [rng.choice([0, 7, 12_345, rng.randint(0, 10**9)]) for _ in range(rng.randint(0, 3))]
            ops.append(("booked", ("k", "t", [Booking("k1", "t", "m", rng.choice("ab"), "d", c) for c in costs])))
    return ops


def run(metrics: Metrics, ops: list[Operation], prepared: bool) -> list[object]:
    """Each op's error, if any, and the renders every 50 ops and at the end."""
    seen: list[object] = []
    if prepared:
        metrics.prepare(config())
    for index, (name, args) in enumerate(ops):
        target: Any = metrics.spend if name == "booked" else metrics
        try:
            getattr(target, name)(*args)
        except Exception as exc:  # the same refusal from both (none is expected from these values)
            seen.append((index, type(exc).__name__, str(exc)))
        if index % 50 == 0:
            seen.append(rendered(metrics))
    seen.append(rendered(metrics))
    return seen


@pytest.mark.parametrize("seed", range(12))
def test_updates_in_place_render_what_updates_by_call_render(seed: int) -> None:
    # Both runs get the same ops, built from the same seed (every value drawn when the op is built).
    prepared = seed % 2 == 0
    in_place = run(Metrics(process_metrics=False), operations(seed, 400), prepared)
    with by_calls():
        reference = run(Metrics(process_metrics=False), operations(seed, 400), prepared)
    assert in_place == reference
    assert "gateway_inflight_requests" in in_place[-1][0]  # type: ignore[index]


def test_negative_amounts_are_refused_as_before() -> None:
    # A counter refuses a negative amount: in place, the update falls back to ``inc``, which raises as it did.
    bad = Sample("m", "a", "a", "chat", True, "ok", 0.0, usage_prompt_tokens=-5, output_tokens=3)
    for cls in (Metrics, StockMetrics):
        with pytest.raises(ValueError, match="non-negative"):
            cls(process_metrics=False).record(bad)
    with by_calls(), pytest.raises(ValueError, match="non-negative"):
        Metrics(process_metrics=False).record(bad)
    metrics = Metrics(process_metrics=False)
    with pytest.raises(ValueError, match="non-negative"):
        metrics.spend.booked("k", "t", [Booking("k1", "t", "m", "a", "a", -3)])


def test_the_in_place_path_is_taken_only_for_plain_values() -> None:
    plain = Metrics(process_metrics=False)
    plain.record(Sample("m", "a", "a", "chat", True, "ok", 0.0, ttft_s=0.1))
    plain.attempt_started("m", "a", "a")
    assert all(c.plain for c in plain._sample_children.values()) and "a" in plain._plain_inflight
    assert plain.spend._plain
    for cls in (StockMetrics, WorkerMetrics):
        assert not children.plain_children(cls.counter_class("x", "x", ["l"], registry=None))
    stock = StockMetrics(process_metrics=False)
    stock.record(Sample("m", "a", "a", "chat", True, "ok", 0.0, ttft_s=0.1))
    stock.attempt_started("m", "a", "a")
    assert not any(c.plain for c in stock._sample_children.values()) and not stock._plain_inflight
    assert not stock.spend._plain
