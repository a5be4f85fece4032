"""``priors.Pool`` (a model's columns kept between answers, an entry read again only when its belief heard) against
``pooled`` of the same beliefs read afresh, and ``Prior``'s written-out ``__init__`` against its fields."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from gateway.routing.priors import Pool, Prior, pooled


@dataclasses.dataclass(slots=True)
class Heard:
    """A sibling's belief as the pool reads it (``priors.Levels``), its levels fixed."""

    answers: int
    noise: list[float]
    spread2: list[float]
    levels: tuple[tuple[float, float], tuple[float, float]]

    def level(self, now: float, metric: int) -> tuple[float, float]:
        return self.levels[metric]


def _heard(rng: random.Random) -> Heard:
    answers = rng.choice([0, 0, 1, 5, 40])
    levels = ((rng.gauss(-1.0, 1.0), 0.1), (rng.gauss(-4.0, 1.0), 0.1)) if answers else ((0.0, 0.0), (0.0, 0.0))
    return Heard(answers, [rng.uniform(0.01, 0.5), rng.uniform(0.01, 0.5)], [rng.uniform(0.01, 0.5)] * 2, levels)


def test_a_pool_heard_one_entry_at_a_time_pools_each_as_pooled_from_the_others() -> None:
    rng = random.Random(7)
    for n in (1, 2, 3, 5):
        prices = [rng.choice([None, 0.0, 1e-6, 4e-6, 3e-5]) for _ in range(n)]
        heards = [_heard(rng) for _ in range(n)]
        pool = Pool(list(prices))
        for i, heard in enumerate(heards):
            pool.hear(i, heard, 0.0)
        for _ in range(60):
            moved = rng.randrange(n)
            heards[moved] = _heard(rng)
            pool.hear(moved, heards[moved], 0.0)
            skip = rng.choice([-1, moved])
            others = [(heards[:i] + heards[i + 1 :], prices[:i] + prices[i + 1 :]) for i in range(n)]
            expected = [None if i == skip else pooled(o, 0.0, prices[i], p) for i, (o, p) in enumerate(others)]
            assert pool.pooled(skip) == expected


def test_a_pool_reads_a_belief_it_read_last_again_only_once_it_heard() -> None:
    """The same belief with no new answer is not read again; with one, or another belief, it is."""
    heard = Heard(5, [0.1, 0.2], [0.1, 0.2], ((-1.0, 0.1), (-4.0, 0.1)))
    pool = Pool([1e-6, 2e-6])
    pool.hear(0, heard, 0.0)
    pool.hear(1, Heard(3, [0.3, 0.1], [0.2, 0.2], ((-0.5, 0.1), (-3.0, 0.1))), 0.0)
    before = pool.pooled()
    heard.noise[0] += 1.0  # never done to a belief's noise unheard: shows the entry was not read again
    pool.hear(0, heard, 0.0)
    assert pool.pooled() == before
    heard.answers += 1  # it heard: read again, the prior of entry 1 moves
    pool.hear(0, heard, 0.0)
    moved = pool.pooled()
    assert moved[1] != before[1]
    heard.noise[0] = 0.1
    pool.hear(0, dataclasses.replace(heard), 0.0)  # another belief is read
    assert pool.pooled()[1] == before[1]


def test_the_prior_takes_its_fields_in_order_with_their_defaults_and_hashes_by_them() -> None:
    fields = dataclasses.fields(Prior)
    defaults: list[Any] = [f.default for f in fields]
    assert Prior() == Prior(*defaults)
    values: list[Any] = [(0.1, None), (0.2, 0.3), (0.4, 0.5), (0.6, 0.7), (None, 0.8), (0.9, 1.0)]
    made = Prior(*values)
    assert [getattr(made, f.name) for f in fields] == values
    assert made == Prior(**{f.name: v for f, v in zip(fields, values, strict=True)})
    assert hash(made) == hash(Prior(*values)) and hash(Prior()) == hash(Prior())
