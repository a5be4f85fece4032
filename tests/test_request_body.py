"""The request body read and written on the hot path: msgspec where it can, ``json``'s reading always."""

from __future__ import annotations

import json

import pytest

from gateway.api import parse_json_body
from gateway.errors import InvalidRequest
from gateway.relay.outbound import encode_body

BODIES = [
    b'{"model": "m", "messages": [{"role": "user", "content": "h\\u00e9 \\ud83d\\ude00"}], "stream": true}',
    b'{"model": "m", "n": 123456789012345678901234567890, "t": 0.30000000000000004, "z": -0.0}',
    b'{"model": "m", "a": 1, "a": 2}',  # the last duplicate wins, as in json
    b'\xef\xbb\xbf{"model": "m"}',  # a byte-order mark: msgspec refuses it, json reads it
    b'{"model": "m", "big": 1e400}',  # out of msgspec's range: json reads it as infinity
]


@pytest.mark.parametrize("raw", BODIES)
def test_a_body_reads_as_json_reads_it(raw: bytes) -> None:
    assert parse_json_body(raw) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": NaN}', "not valid JSON"),
        (b'{"model": "m"} trailing', "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"model": "a\\ud800"}', "unpaired UTF-16 surrogate"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_a_bad_body_is_refused_with_json_s_reason(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_json_body(raw)


def test_the_upstream_body_holds_the_same_values_in_the_same_order() -> None:
    body = json.loads(BODIES[0] + b"")
    body["extra"] = {"n": 10**20, "f": 1e16, "s": "\u2028é"}
    encoded = encode_body(body)
    assert json.loads(encoded) == body
    assert list(json.loads(encoded)) == list(body)
    # A lone surrogate has no UTF-8 form: kept escaped.
    assert json.loads(encode_body({"s": "a\ud800"})) == {"s": "a\ud800"}
