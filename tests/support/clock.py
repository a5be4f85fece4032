"""A clock the test moves by hand, for every component that takes an injected clock."""

from __future__ import annotations


class FakeClock:
    """Call it for the time; set ``now`` or ``advance`` it. Stands for monotonic and wall clocks alike."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
