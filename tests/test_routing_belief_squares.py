"""An answer's squared residuals found once per run (``student.likelihoods``) and its fits and chances kept on the
runs: the densities, the scatters' weights and the Kalman steps are the former code's to the bit.

The former code is written out below: each of ``_density``, ``_kalman`` and ``belief_scatter._weigh`` found
``math.pow(value - mean, 2.0)`` itself, ``likelihoods`` returned a list and ``_weigh`` read a list of chances."""

from __future__ import annotations

import math
import random

from gateway.routing import student
from gateway.routing.belief_runs import Run
from gateway.routing.belief_scatter import Scatter, _weigh

_POWER = -(student.TAIL_NU + 1) / 2


def _former_density(value: float, mean: float, var: float, n: float) -> float:
    scale2 = var + n
    z2 = math.pow(value - mean, 2.0) / scale2
    return math.pow(1.0 + z2 / student.TAIL_NU, _POWER) / math.sqrt(scale2)


def _former_kalman(value: float, mean: float, var: float, n: float) -> tuple[float, float]:
    weight = (student.TAIL_NU + 1) / (student.TAIL_NU + math.pow(value - mean, 2.0) / (var + n))
    gain = var / (var + n / weight)
    return mean + gain * (value - mean), (1 - gain) * var


def _former_marginals(
    noises: list[float], chances: list[float], runs: list[Run], metric: int, value: float, unsure: float
) -> list[float]:
    sums = [0.0] * len(noises)
    for i, run in enumerate(runs):
        mean, var = (run.mean0, run.var0) if metric == 0 else (run.mean1, run.var1)
        square = math.pow(value - mean, 2.0)
        for j, noise in enumerate(noises):
            scale2 = var + unsure + noise
            sums[j] += chances[i] * math.pow(1.0 + square / scale2 / student.TAIL_NU, _POWER) / math.sqrt(scale2)
    return sums


def _runs(rng: random.Random) -> list[Run]:
    return [
        Run(rng.random(), rng.gauss(-1, 2), rng.gauss(-4, 2), rng.uniform(1e-6, 3), rng.uniform(1e-6, 3))
        for _ in range(rng.randint(1, 7))
    ]


def test_the_squares_found_once_give_the_former_densities_weights_and_steps_to_the_bit() -> None:
    rng = random.Random(41)
    for _ in range(3000):
        runs = _runs(rng)
        values = tuple(rng.choice([None, rng.gauss(-2, 3), rng.uniform(-1e-3, 1e-3)]) for _ in range(2))
        noise = [rng.uniform(1e-4, 2.0), rng.uniform(1e-4, 2.0)]
        before = [(r.mean0, r.var0, r.mean1, r.var1) for r in runs]
        student.likelihoods(runs, values, (None, None), noise)
        for run, (m0, v0, m1, v1) in zip(runs, before, strict=True):
            p = 1.0
            if values[0] is not None:
                p *= _former_density(values[0], m0, v0, noise[0])
            if values[1] is not None:
                p *= _former_density(values[1], m1, v1, noise[1])
            assert run.fit.hex() == p.hex()
        unsure = rng.choice([0.0, rng.uniform(0.0, 0.5)])
        for metric in (0, 1):
            value = values[metric]
            if value is None:
                continue
            noises = [rng.uniform(1e-4, 2.0) for _ in range(rng.randint(2, 4))]
            chances = [rng.random() for _ in runs]
            for run, chance in zip(runs, chances, strict=True):
                run.chance = chance
            scatters = [Scatter(1.0, n) for n in noises]
            _weigh(scatters, (runs, metric), unsure)
            former = _former_marginals(noises, chances, runs, metric, value, unsure)
            assert [s.weight.hex() for s in scatters] == [m.hex() for m in former]
        student.update_all(runs, values, (None, None), noise)
        for run, (m0, v0, m1, v1) in zip(runs, before, strict=True):
            e0 = _former_kalman(values[0], m0, v0, noise[0]) if values[0] is not None else (m0, v0)
            e1 = _former_kalman(values[1], m1, v1, noise[1]) if values[1] is not None else (m1, v1)
            assert [x.hex() for x in (run.mean0, run.var0, run.mean1, run.var1)] == [x.hex() for x in (*e0, *e1)]
