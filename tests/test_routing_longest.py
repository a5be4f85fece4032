"""``deadlines.longest`` finds what ``max`` finds.

``GapWindow.add`` keeps each answer's longest chunk gap; compiled, ``longest`` compares native doubles over the
sample's tuple of gaps instead of the builtin's Python floats. It must return the very object's value ``max`` would,
by the builtin's rule: the first item is the start, a later one replaces it only when it compares greater (a NaN first
is kept, a NaN later is passed over; of ``0.0`` and ``-0.0`` the first stays).
"""

from __future__ import annotations

import math
import random

from gateway.routing.deadlines import GapWindow, longest

_ODD = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-300, 5e-324)


def test_longest_is_max_bit_for_bit() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        size = rng.randrange(1, 40)
        gaps = [rng.choice(_ODD) if rng.random() < 0.15 else rng.expovariate(20.0) for _ in range(size)]
        if rng.random() < 0.5:  # ties and signed zeros at the top: which of equal items is kept shows
            gaps = [rng.choice((*_ODD, -1.0, 2.0, 2.0)) for _ in range(size)]
        for given in (tuple(gaps), gaps):
            assert repr(longest(given)) == repr(max(given))
            assert math.copysign(1.0, longest(given)) == math.copysign(1.0, max(given))


def test_a_window_keeps_each_answers_longest_gap() -> None:
    window = GapWindow()
    window.add(())
    window.add((0.01, 0.5, 0.2))
    window.add([0.3, math.nan])
    assert list(window.gaps) == [0.5, 0.3]
