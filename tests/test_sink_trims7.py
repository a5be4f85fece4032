"""The seventh sinks pass's trims hold what they replace: ``Spender.tag`` made once is ``shard_tag``, the window's
validity key found inline is ``_validity_key``'s, and a stamp's tail joined is the formatted one."""

from __future__ import annotations

import random

from gateway.access_numbers import MILLIS, Stamps
from gateway.admission.spending import Budget, Spender
from gateway.admission.spending.ledger import shard_tag
from gateway.samples import REQUEST_KINDS, VALIDITIES, Sample
from gateway.stats import window as window_module
from gateway.stats.snapshot import validity_key
from gateway.stats.window import SlicedWindow


def test_a_spenders_tag_is_its_shard_tag_and_not_a_field_that_compares() -> None:
    for key_id, team in (("k1", "search"), ("k2", None), ("k3", ""), ("k:4", "t:5")):
        spender = Spender.of(key_id, "name", team, Budget(1.0, "day"), Budget(2.0, "month"))
        assert spender.tag == shard_tag(key_id, team or "")
        twin = Spender(spender.key_id, spender.key_name, spender.team, spender.scopes)
        assert twin == spender and hash(twin) == hash(spender) and twin.tag == spender.tag
        assert repr(spender) == (
            f"Spender(key_id={key_id!r}, key_name='name', team={team or ''!r}, scopes={spender.scopes!r})"
        )


def test_the_windows_validity_counts_are_validity_keys() -> None:
    """Every kind × verdict counted in the slice and the total under ``validity_key``, a pair first seen or not."""
    window_module._VALIDITY_KEYS.clear()
    rng = random.Random(5)
    window = SlicedWindow(60, 5, lambda: 1000.0)
    expected: dict[str, int] = {}
    for _ in range(500):
        kind = rng.choice((*REQUEST_KINDS, None))
        verdict = rng.choice((*VALIDITIES, None))
        sample = Sample("m", "d", "p", "chat", False, "ok", 0.0, kind=kind, validity=verdict)
        window.add(sample)
        key = validity_key(sample)
        if key is not None:
            expected[key] = expected.get(key, 0) + 1
    total = window.total[("m", "d")]
    assert total.validity == expected
    (part,) = [s[("m", "d")] for s in window.slices.values()]
    assert part.validity == expected


def test_a_stamps_tail_is_the_formatted_one() -> None:
    assert MILLIS == tuple(f".{millis:03d}+00:00" for millis in range(1000))
    stamps = Stamps()
    assert stamps.text(1.7e9 + 0.0429) == "2023-11-14T22:13:20.042+00:00"
