"""The in-process store's ``snapshot``: the window's expiry skipped where it would drop nothing, and the snapshot made
without its frozen dataclass's generated ``__init__``, held to the former code.

``SlicedWindow.expire_aged`` skips the pass over the slices when no slice is older than the oldest the window keeps;
a window that always runs ``expire`` must hold the same slices and the same totals (sums to the last bit) after every
expiry, whatever the clock does: forwards a little or past the window, backwards, slices merged from elsewhere
(``add_summary``) below what was kept, the window cleared.
"""

from __future__ import annotations

import dataclasses
import random

from gateway.config import StatsConfig
from gateway.stats import InMemoryStatsStore
from gateway.stats.snapshot import DeploymentSummary, StatsSnapshot
from gateway.stats.window import SlicedWindow
from tests.stats.test_window import _fingerprint
from tests.support.clock import FakeClock
from tests.support.samples import make_sample


def _state(window: SlicedWindow) -> list[object]:
    return [(i, _fingerprint(s)) for i, s in window.slices.items()] + [_fingerprint(window.total)]


def test_expire_aged_keeps_what_expire_keeps() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        clock = FakeClock(1_800_000_000.0)
        aged, always = SlicedWindow(60, 10, clock), SlicedWindow(60, 10, clock)
        skipped = 0
        for _ in range(400):
            roll = rng.random()
            if roll < 0.5:
                sample = make_sample(rng.choice("mn"), "d", ttft_s=rng.expovariate(3.0), e2e_s=rng.expovariate(0.3))
                aged.add(sample)
                always.add(sample)
            elif roll < 0.6:
                part = DeploymentSummary("m", rng.choice("de"))
                part.add(make_sample("m", part.deployment, ttft_s=rng.expovariate(1.0)))
                index = aged.oldest_kept() + rng.randint(0, 7)
                assert aged.add_summary(index, part.copy()) == always.add_summary(index, part.copy())
            elif roll < 0.62:
                aged.clear()
                always.clear()
            else:
                before = len(aged.slices)
                aged.expire_aged()
                always.expire()
                skipped += len(aged.slices) == before
                assert _state(aged) == _state(always)
            clock.advance(rng.choice([0.0, 0.5, 3.0, 10.0, 25.0, -4.0, -30.0, 70.0, -200.0]))
        aged.expire_aged()
        always.expire()
        assert _state(aged) == _state(always)
        assert skipped > 0


def test_the_store_snapshot_is_the_dataclass_made_as_before() -> None:
    clock = FakeClock(1_800_000_000.0)
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=10), clock, replica="r1")
    store.record(make_sample(ttft_s=0.2))
    clock.advance(5.0)
    snapshot = store.snapshot()
    expected = StatsSnapshot(store.window.total, clock.now, store.answers, "r1")
    assert type(snapshot) is StatsSnapshot
    assert snapshot == expected and hash(snapshot.taken_at) == hash(expected.taken_at)
    assert list(vars(snapshot).items()) == list(vars(expected).items())
    assert snapshot.summaries is store.window.total and snapshot.answers is store.answers
    assert dataclasses.asdict(snapshot).keys() == dataclasses.asdict(expected).keys()
    try:
        snapshot.taken_at = 0.0  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("the snapshot is frozen as before")
