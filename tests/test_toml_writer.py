"""``gateway.toml_writer``: what it writes, ``tomllib`` reads back as the same data."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.toml_writer import dumps

SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(),
)
KEYS = st.text(min_size=1, max_size=12)


def test_a_config_shaped_document_round_trips_with_its_header() -> None:
    data: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 8080, "access_log": False},
        "stats": {"backend": "memory", "window_s": 60},
        "providers": [{"name": "a", "base_url": "http://127.0.0.1:1/v1", "headers": {"x-k": "v"}}],
        "models": [{"name": "m", "deployments": [{"provider": "a", "model": "u", "price_in": 0.25}]}],
        "policies": {"p": {"weights": [1, 2.5], "extends": "balanced"}},
    }
    text = dumps(data, header="line one\nline two")
    assert text.startswith("# line one\n# line two\n\n[server]\n")
    assert "\n\n\n" not in text
    assert tomllib.loads(text) == data


@given(st.dictionaries(KEYS, st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(KEYS, SCALARS))))
def test_any_table_of_scalars_round_trips(data: dict[str, Any]) -> None:
    assert tomllib.loads(dumps(data)) == data


@pytest.mark.parametrize("value", [None, object(), [{"a": 1}, 2]])
def test_what_toml_cannot_hold_is_refused(value: object) -> None:
    with pytest.raises(TypeError, match="cannot write"):
        dumps({"key": value})
