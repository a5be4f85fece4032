"""The failure belief's ``counts`` and the runs' ``landings`` after their rewrites, held to the former code bit for bit.

``Failures.counts`` found each run's terms once per outcome heard, as a memo of tuples (boxed floats when
compiled); it now finds them where it reads them, by the same expressions. ``landings`` made its first run through
``start_at`` (tuples of optional floats); it now makes it directly, with the same values. ``finite`` stands in for
``math.isfinite`` (no mypyc primitive) where the belief prunes: the same answer for every float.
"""

from __future__ import annotations

import math
import random

from gateway.routing.belief_failures import FAIL_PRIOR, Failures
from gateway.routing.belief_runs import Run, finite, landings, start_at
from gateway.routing.priors import SPREAD, Prior


def _former_counts(failures: Failures, now: float, hazard_s: float) -> tuple[float, float]:
    """``Failures.counts`` as it was (without its memo of the last read)."""
    a0, b0 = FAIL_PRIOR
    s0 = a0 + b0
    m0 = a0 / s0
    v0 = m0 * (b0 / s0) / (s0 + 1)
    heard = failures.heard_at
    p = 0.0 if heard is None else 1.0 - math.exp(-max(0.0, now - heard) / hazard_s)
    terms = []
    for r in failures.runs:
        a, b = r.fails, r.oks
        s = a + b
        m = a / s
        terms.append((r.weight, a, s, m, m * (b / s) / (s + 1)))
    stayed = 1.0 - p
    mean = 0.0
    for t in terms:
        mean += stayed * t[0] * t[1] / t[2]
    mean += p * a0 / s0
    var = 0.0
    for t in terms:
        var += stayed * t[0] * (t[4] + math.pow(t[3] - mean, 2.0))
    var += p * (v0 + math.pow(m0 - mean, 2.0))
    mean = min(max(mean, 1e-6), 1 - 1e-6)
    n = max(mean * (1 - mean) / max(var, 1e-12) - 1.0, 1e-3)
    return mean * n, (1 - mean) * n


def _bits(pair: tuple[float, float]) -> tuple[str, str]:
    return pair[0].hex(), pair[1].hex()


def test_counts_are_the_former_terms_exactly() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        failures, now, hazard_s = Failures(), 0.0, rng.choice([5.0, 120.0, 4000.0])
        assert _bits(failures.counts(now, hazard_s)) == _bits(_former_counts(failures, now, hazard_s))
        for _ in range(150):
            now += rng.choice([0.0, 0.01, 0.3, 2.0, 40.0, 900.0])
            roll = rng.random()
            if roll < 0.02:
                failures.recovered(now)
            else:
                failed = roll < rng.choice([0.1, 0.5, 0.9])
                failures.observe(now, failed, hazard_s, rng.choice([None, 0.5, 3.0]))
            for later in (now, now, now + rng.choice([0.0, 1.0, 30.0, 1e4])):
                assert _bits(failures.counts(later, hazard_s)) == _bits(_former_counts(failures, later, hazard_s))


def _former_landings(changed_before: bool, before: tuple[float, float] | None, prior: Prior) -> list[Run]:
    if changed_before:
        (m0, v0), (m1, v1) = prior.landing(0), prior.landing(1)
        runs = [start_at(m0, m1, v0, v1)]
    else:
        runs = [start_at(*prior.mean, *prior.var)]
    if changed_before and before is not None:
        runs.append(Run(1.0, before[0], before[1], SPREAD**2, SPREAD**2))
    for run in runs:
        run.weight = 1.0 / len(runs)
    return runs


def test_landings_are_the_former_runs_exactly() -> None:
    rng = random.Random(3)
    means: list[float | None] = [None, 0.0, -0.0, -3.2, 1.7, math.inf, math.nan]
    for _ in range(3000):
        prior = Prior(
            mean=(rng.choice([*means, rng.gauss(0, 2)]), rng.choice([*means, rng.gauss(-4, 1)])),
            var=(rng.choice([0.0, 0.3, rng.expovariate(1.0)]), rng.choice([0.0, 9.0, rng.expovariate(1.0)])),
            centre=(rng.choice([None, rng.gauss(0, 2)]), rng.choice([None, rng.gauss(-4, 1)])),
        )
        before = rng.choice([None, (rng.gauss(0, 1), rng.gauss(-4, 1))])
        changed = rng.random() < 0.7
        got, expected = landings(changed, before, prior), _former_landings(changed, before, prior)
        assert [repr(r) for r in got] == [repr(r) for r in expected]


def test_finite_is_math_isfinite() -> None:
    rng = random.Random(5)
    edges = [0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324, 1.7976931348623157e308, -1.7976931348623157e308]
    for x in [*edges, math.inf, -math.inf, math.nan, -math.nan, *(rng.uniform(-1e308, 1e308) for _ in range(1000))]:
        assert finite(x) is math.isfinite(x)
