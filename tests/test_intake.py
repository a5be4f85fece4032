"""The request path's fast forms give what the forms they replaced gave (ids, shape errors, sessions, spenders)."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from gateway import api, shapes
from gateway.errors import InvalidRequest
from gateway.samples import Endpoint


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


def _old_check_shape(body: Mapping[str, Any], endpoint: Endpoint) -> None:
    """``shapes.check_shape`` as it was: every field of the API in order, every message's param written."""
    for field, expected in shapes._FIELDS[endpoint].items():
        value = body.get(field)
        if value is not None and not shapes._is(value, expected):
            raise shapes._refuse(field, expected, value)

    def messages(items: list[Any], roles: tuple[str, ...]) -> None:
        for index, message in enumerate(items):
            param = f"messages[{index}]"
            if not isinstance(message, dict):
                raise shapes._refuse(param, shapes._OBJECT, message)
            shapes._check_message(message, param, roles)

    if endpoint == "chat":
        messages(body["messages"], shapes._CHAT_ROLES)
    elif endpoint == "messages":
        messages(body["messages"], shapes._MESSAGES_ROLES)
    elif endpoint == "responses" and isinstance(body.get("input"), list):
        shapes._check_input_items(body["input"])


_VALUES: list[Any] = [None, True, False, 0, 3, 2.5, -1, "", "text", [], ["a"], [{"type": "text"}], {}, {"a": 1}]
_ROLES: list[Any] = ["system", "developer", "user", "assistant", "tool", "function", "wizard", None, 3, ["user"]]


def _random_body(rng: random.Random) -> dict[str, Any]:
    names = sorted({name for fields in shapes._FIELDS.values() for name in fields} | {"model", "extra"})
    body: dict[str, Any] = {name: rng.choice(_VALUES) for name in rng.sample(names, rng.randint(0, 8))}
    turns: list[Any] = []
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.1:
            turns.append(rng.choice(_VALUES))
            continue
        turn: dict[str, Any] = {}
        if rng.random() < 0.9:
            turn["role"] = rng.choice(_ROLES)
        if rng.random() < 0.9:
            turn["content"] = rng.choice([*_VALUES, "hello", [{"type": "text", "text": "x"}], [{"text": 1}], [3]])
        turns.append(turn)
    body["messages"] = turns
    if rng.random() < 0.5:
        body["input"] = turns
    return body


def _outcome(check: Callable[[Mapping[str, Any], Endpoint], None], body: Mapping[str, Any], endpoint: Endpoint) -> Any:
    try:
        check(body, endpoint)
    except InvalidRequest as exc:
        return (exc.message, exc.param, exc.code, exc.status_code)
    return None


@pytest.mark.parametrize("endpoint", ["chat", "completions", "embeddings", "responses", "messages"])
def test_check_shape_refuses_as_before(endpoint: Endpoint) -> None:
    rng = random.Random(endpoint)
    refused = 0
    for _ in range(4000):
        body = _random_body(rng)
        before = _outcome(_old_check_shape, body, endpoint)
        assert _outcome(shapes.check_shape, body, endpoint) == before, body
        refused += before is not None
    assert 1000 < refused < 4000  # both verdicts, many times over
