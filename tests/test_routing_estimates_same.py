"""The fast view's cheaper bookkeeping decides what the former code decided, to the last bit.

``DeploymentView.add`` reads each value and each spread once, computes the change tests' shifts alone (a window's
first answer and gap only where a shift is far enough to need them), and passes over the joint test when no pair of
shifts can reach its bar; ``late_first_token`` reads a count kept as attempts start, stream and end instead of
walking every attempt in flight. ``_FormerView`` below is the code before (copied), and both views are fed the same
random answers, failures, lost races and attempts: every change, its first answer and direction, every follow-up,
estimate, spread and run must come out equal (``==`` on floats, not approximately).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import pytest

from gateway import native
from gateway.routing.estimates import (
    CHANGE_MIN_Z,
    FOLLOW_UP_TRIES,
    LEAP_EACH_Z,
    LEAP_METRICS,
    OVERDUE_MIN,
    SHARED_CHANGE_Z,
    SPREAD_CLIP_AFTER,
    SPREAD_HALF_LIFE,
    SURPRISE_JOINT_Z,
    SURPRISE_Z,
    VIEW_METRICS,
    Z_CLIP,
    DeploymentView,
    Observation,
    ViewMetric,
    _bounded,
    _Run,
    _Sums,
    change_threshold,
)

if native.active():
    # It subclasses ``DeploymentView`` to keep the former code beside the new, which a compiled class refuses;
    # the compiled view is held to the Python one by ``tests/test_native.py``.
    pytest.skip("subclasses a compiled class: run with GATEWAY_NATIVE=0", allow_module_level=True)

_Tests = dict[ViewMetric, list[tuple[int, float, float]]]


def _former_shifts(run: _Run, sigma: float) -> list[tuple[int, float, float]]:
    found: list[tuple[int, float, float]] = []
    raw = clipped = 0.0
    latest = run.latest
    newest = len(latest) - 1
    for length in range(1, len(latest)):
        before = run.count - length
        if before < 1:
            break
        seq, log, bounded, at = latest[newest - length + 1]
        raw += log
        clipped += bounded
        base = (run.total - raw) / before
        deviation = (log if length == 1 else clipped) - length * base
        gap = at - latest[newest - length][3]
        found.append((seq, deviation / length / (sigma * math.sqrt(1.0 / length + 1.0 / before)), gap))
    return found


def _former_surprising(tests: Mapping[ViewMetric, list[tuple[int, float, float]]]) -> bool:
    alone = {metric: shifts[0][1] for metric, shifts in tests.items() if shifts}
    if any(shift <= -SURPRISE_Z for shift in alone.values()):
        return True
    first, stream = (alone.get(m) for m in LEAP_METRICS)
    return first is not None and stream is not None and (first + stream) / math.sqrt(2) <= -SURPRISE_JOINT_Z


class _FormerView(DeploymentView):
    """``DeploymentView`` with ``add``, its change tests and ``late_first_token`` as they were."""

    def add(self, observation: Observation) -> None:
        self.seq += 1
        self.answers.append((self.seq, observation))
        changes: dict[ViewMetric, int] = {}
        surprised = False
        if observation.ok is True:
            tests = self._former_tests(observation)
            changes = self._former_changes(tests)
            surprised = _former_surprising(tests)
        for metric in VIEW_METRICS:
            value = self._value(observation, metric)
            if value is None or value <= 0:
                continue
            sums = self.sums.setdefault(metric, _Sums())
            spread = self.spreads.setdefault(metric, _Sums())
            spread.add(observation.at, self._former_for_spread(metric, value), 0.0, SPREAD_HALF_LIFE)
            since = changes.get(metric)
            if since is not None:
                self._restart(metric, since, observation.at)
            else:
                sums.add(observation.at, value, self.half_life_s)
            self._estimates.pop(metric, None)
        if observation.ok is not None:
            self.outcomes.add(observation.at, 2.0 if observation.ok else 1.0, self.half_life_s)
        if observation.failed_after_s is not None:
            self.failures.add(observation.at, max(observation.failed_after_s, 1e-3), self.half_life_s)
        if observation.ok:
            self.answered += 1
            leap = any(since == self.seq for since in changes.values())
            self.follow_ups = FOLLOW_UP_TRIES if leap or (surprised and not changes) else 0

    def _former_for_spread(self, metric: ViewMetric, value: float) -> float:
        kept = self.spreads.get(metric)
        if kept is None or kept.weight < SPREAD_CLIP_AFTER:
            return value
        return math.exp(_bounded(math.log(value), kept.logs / kept.weight, Z_CLIP * self.spread(metric)))

    def _former_tests(self, observation: Observation) -> _Tests:
        found: _Tests = {}
        for metric in VIEW_METRICS:
            value = self._value(observation, metric)
            if value is None or value <= 0:
                continue
            run = self.runs.get(metric)
            if run is None:
                run = self.runs[metric] = _Run()
            spread = self.spread(metric)
            run.add(self.seq, math.log(value), observation.at, spread)
            found[metric] = _former_shifts(run, spread)
        return found

    def _former_changes(self, tests: _Tests) -> dict[ViewMetric, int]:
        found: dict[ViewMetric, tuple[int, float, float]] = {}
        for metric, shifts in tests.items():
            for length, (since, shift, gap) in enumerate(shifts, start=1):
                if abs(shift) < CHANGE_MIN_Z:
                    continue
                excess = abs(shift) - change_threshold(gap)
                if length >= 2 and excess >= 0 and (metric not in found or excess > found[metric][1]):
                    found[metric] = (since, excess, math.copysign(1.0, shift))
        first, stream = (tests.get(m) for m in LEAP_METRICS)
        if first and stream:
            for length, ((since, a, gap), (other, b, _)) in enumerate(zip(first, stream, strict=False), start=1):
                if since != other:
                    break
                joint = (a + b) / math.sqrt(2.0)
                if abs(joint) < CHANGE_MIN_Z or (length == 1 and joint > 0):
                    continue
                lean = min(a * math.copysign(1.0, joint), b * math.copysign(1.0, joint))
                excess = abs(joint) - change_threshold(gap)
                if excess >= 0 and lean >= LEAP_EACH_Z:
                    for metric in LEAP_METRICS:
                        if metric not in found or found[metric][1] < excess:
                            found[metric] = (since, excess, math.copysign(1.0, joint))
        pairs: tuple[tuple[ViewMetric, ViewMetric], ...] = (LEAP_METRICS, (LEAP_METRICS[1], LEAP_METRICS[0]))
        for looked, changed in pairs:
            point = found[changed][0] if changed in found else self.restart_seq.get(changed)
            run = self.runs.get(looked)
            if point is None or looked in found or run is None or point <= self.restart_seq.get(looked, 0):
                continue
            moved = run.shift_since(point, self.spread(looked))
            way = found[changed][2] if changed in found else self._direction.get(changed, 0.0)
            if moved is not None and moved * way >= SHARED_CHANGE_Z:
                found[looked] = (point, 0.0, way)
        for metric, (_, _, way) in found.items():
            self._direction[metric] = way
        return {metric: since for metric, (since, _, _) in found.items()}

    def late_first_token(self, now: float) -> float:
        waiting = 0
        for attempt in self.pending.values():
            if attempt.predicted_first_token_s is not None and attempt.streaming_at is None:
                waiting += 1
        if waiting < OVERDUE_MIN:
            return 1.0
        return self._late_share(
            now, lambda a: a.predicted_first_token_s, lambda a: a.streaming_at is None and a.ended_at is None
        )


def _sums(sums: _Sums) -> tuple[float, ...]:
    return (sums.at, sums.weight, sums.squares, sums.values, sums.logs, sums.log_squares)


def _state(view: DeploymentView, now: float) -> tuple[Any, ...]:
    """Everything ``add`` leaves that anything reads, floats compared exactly (through ``repr``)."""
    return (
        view.seq,
        view.answered,
        view.follow_ups,
        sorted(view.changed_at.items()),
        sorted(view.restart_seq.items()),
        sorted(view._direction.items()),
        sorted(view.regime_started_at.items()),
        repr([view.estimate(m) for m in VIEW_METRICS]),
        repr([view.spread(m) for m in VIEW_METRICS]),
        repr(sorted((m, _sums(s)) for m, s in view.sums.items())),
        repr(sorted((m, _sums(s)) for m, s in view.spreads.items())),
        repr(sorted((m, r.total, r.count, list(r.latest)) for m, r in view.runs.items())),
        repr((_sums(view.outcomes), _sums(view.failures))),
        view.late_first_token(now),
        view.overdue(now),
    )


class _Progress:
    def __init__(self, received: int) -> None:
        self.received_bytes = received
        self.api = "chat"


def _market(seed: int) -> list[tuple[str, Any]]:
    """A deployment's life: a level that moves now and then (first token, stream or both, faster or slower, by a
    little or by much), heavy tails and outliers, one-chunk answers, failures, lost races, quiet gaps, attempts that
    start, stream (or not) and end in any order, some answers sent before a change began."""
    rng = random.Random(seed)
    steps: list[tuple[str, Any]] = []
    now = 0.0
    ttft, spt = 0.3, 0.01
    sigma = rng.choice((0.1, 0.35, 0.8))
    pending: list[int] = []
    token = 0
    for _ in range(rng.randrange(150, 400)):
        now += rng.expovariate(rng.choice((2.0, 20.0, 200.0))) if rng.random() > 0.02 else rng.uniform(20, 120)
        roll = rng.random()
        if roll < 0.04:
            which = rng.choice(("ttft", "spt", "both"))
            factor = rng.choice((0.2, 0.5, 0.8, 1.25, 2.0, 5.0))
            ttft *= factor if which != "spt" else 1.0
            spt *= factor if which != "ttft" else 1.0
        if roll < 0.15:
            token += 1
            first = rng.choice((None, ttft))
            steps.append(("start", (token, now, rng.choice((None, ttft + 32 * spt)), first)))
            pending.append(token)
        elif roll < 0.2 and pending:
            steps.append(("stream", (rng.choice(pending), now, _Progress(rng.randrange(100, 9000)))))
        elif roll < 0.26 and pending:
            done = pending.pop(rng.randrange(len(pending)))
            steps.append(("end", (done, now, rng.choice((None, 1, 32)))))
        elif roll < 0.29:
            steps.append(("add", Observation(now, ttft * rng.uniform(1, 5), ok=False, failed_after_s=rng.random())))
        elif roll < 0.32:
            steps.append(("confirm", (rng.choice((ttft * 0.5, ttft * 3.0)), now)))
        else:
            tail = rng.lognormvariate(0, sigma) * (rng.choice((0.2, 6.0)) if rng.random() < 0.03 else 1.0)
            first_token = ttft * tail
            per_token = spt * rng.lognormvariate(0, sigma) if rng.random() > 0.1 else None
            e2e = first_token + 32 * (per_token or spt)
            started = now - e2e * rng.choice((1.0, 1.0, 1.0, 30.0))
            warm = first_token * 0.7 if rng.random() < 0.5 else None
            steps.append(("add", Observation(now, first_token, per_token, e2e, warm_ttft_s=warm, started_at=started)))
    return steps


def _apply(view: DeploymentView, step: tuple[str, Any]) -> float:
    kind, args = step
    if kind == "add":
        view.add(args)
        return float(args.at)
    if kind == "start":
        token, at, predicted, first = args
        view.started(token, at, predicted, first)
        return float(at)
    if kind == "stream":
        token, at, progress = args
        view.streaming(token, at, progress)
        return float(at)
    if kind == "end":
        token, at, tokens = args
        view.ended(token, at, tokens)
        return float(at)
    at_least, at = args
    view.confirm("ttft_s", at_least, at)
    return float(at)


@pytest.mark.parametrize("seed", range(60))
def test_the_view_decides_what_the_former_code_decided(seed: int) -> None:
    new, old = DeploymentView(10.0), _FormerView(10.0)
    for view in (new, old):
        view.prior_spreads = {"ttft_s": 0.4, "seconds_per_token": 0.3} if seed % 2 else {}
    for step in _market(seed):
        now = _apply(new, step)
        assert _apply(old, step) == now
        assert _state(new, now) == _state(old, now)
        assert new.awaiting_first == sum(
            1 for a in new.pending.values() if a.predicted_first_token_s is not None and a.streaming_at is None
        )


def test_the_markets_exercise_changes_leaps_and_surprises() -> None:
    """The comparison above means something only if its markets reach every branch: changes of each kind,
    follow-ups asked for, and first tokens awaited by enough attempts for ``late_first_token`` to judge them."""
    restarts = follow_ups = late = 0
    for seed in range(60):
        view = DeploymentView(10.0)
        for step in _market(seed):
            now = _apply(view, step)
            follow_ups += view.follow_ups == FOLLOW_UP_TRIES
            late += view.awaiting_first >= OVERDUE_MIN and view.late_first_token(now) > 1.0
        restarts += len(view.restart_seq)
    assert restarts >= 60
    assert follow_ups >= 60
    assert late >= 10
