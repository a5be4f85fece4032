"""The request path's fast forms give what the forms they replaced gave (ids, shape errors, sessions, spenders)."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from gateway import api


def test_request_id_is_uuid4_hex_of_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(41)
    draws = [bytes(rng.getrandbits(8) for _ in range(16)) for _ in range(2000)]
    draws += [b"\x00" * 16, b"\xff" * 16]
    for raw in draws:
        monkeypatch.setattr(os, "urandom", lambda n, raw=raw: raw)
        assert api.new_request_id() == uuid.UUID(bytes=raw, version=4).hex
    monkeypatch.undo()
    made = {api.new_request_id() for _ in range(1000)}
    assert len(made) == 1000
    assert all(len(i) == 32 and uuid.UUID(hex=i).version == 4 for i in made)
