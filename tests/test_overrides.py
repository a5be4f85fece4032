"""OpenRouter's ``provider`` object and model suffixes: what is accepted, and 400s that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest
from gateway.routing.overrides import NO_PREFERENCES, ProviderPreferences, parse_preferences, split_model_suffix


def test_absent_is_no_preferences() -> None:
    assert parse_preferences(None) == NO_PREFERENCES
    assert not NO_PREFERENCES.steers


def test_every_field() -> None:
    prefs = parse_preferences(
        {
            "order": ["Groq", "together"],
            "only": ["groq", "together", "fireworks"],
            "ignore": ["deepinfra"],
            "allow_fallbacks": False,
            "sort": "latency",
            "max_price": {"prompt": 1, "completion": "2.5"},
            "preferred_min_throughput": 100,
            "preferred_max_latency": {"p50": 1, "p90": 3},
        }
    )
    assert prefs == ProviderPreferences(
        order=("groq", "together"),
        only=("groq", "together", "fireworks"),
        ignore=("deepinfra",),
        allow_fallbacks=False,
        sort="latency",
        max_price_in=1.0,
        max_price_out=2.5,
        min_tokens_per_s=((0.5, 100.0),),
        max_ttft_s=((0.5, 1.0), (0.9, 3.0)),
    )
    assert prefs.steers


def test_sort_object_form() -> None:
    assert parse_preferences({"sort": {"by": "throughput", "partition": "none"}}).sort == "throughput"


def test_model_suffixes() -> None:
    assert split_model_suffix("llama:nitro", {"llama"}) == ("llama", "throughput")
    assert split_model_suffix("llama:floor", {"llama"}) == ("llama", "price")
    assert split_model_suffix("odd:nitro", {"odd:nitro"}) == ("odd:nitro", None)  # a configured name wins
    assert split_model_suffix(":nitro", set()) == (":nitro", None)
    assert parse_preferences(None, "price") == ProviderPreferences(sort="price")
    assert parse_preferences({"sort": "price"}, "price").sort == "price"


@pytest.mark.parametrize(
    ("value", "param", "message"),
    [
        ([], "provider", "'provider' must be an object"),
        (
            {"sort": "speed"},
            "provider.sort",
            "'provider.sort' must be one of price, throughput, latency, got \"speed\"",
        ),
        ({"sort": {"by": "price", "x": 1}}, "provider.sort.x", "'provider.sort.x' is not supported"),
        ({"order": "groq"}, "provider.order", "'provider.order' must be an array of provider names"),
        ({"only": ["a", 3]}, "provider.only[1]", "'provider.only[1]' must be a non-empty string"),
        ({"ignore": [""]}, "provider.ignore[0]", "'provider.ignore[0]' must be a non-empty string"),
        ({"allow_fallbacks": "no"}, "provider.allow_fallbacks", "'provider.allow_fallbacks' must be true or false"),
        ({"max_price": 3}, "provider.max_price", "'provider.max_price' must be an object (prompt, completion)"),
        ({"max_price": {"request": 1}}, "provider.max_price.request", "'provider.max_price.request' is not supported"),
        (
            {"max_price": {"prompt": -1}},
            "provider.max_price.prompt",
            "'provider.max_price.prompt' must be >= 0, got -1",
        ),
        ({"max_price": {"prompt": "cheap"}}, "provider.max_price.prompt", 'must be a number, got "cheap"'),
        ({"preferred_min_throughput": 0}, "provider.preferred_min_throughput", "must be > 0, got 0"),
        ({"preferred_min_throughput": True}, "provider.preferred_min_throughput", "must be a number of tokens/s"),
        ({"preferred_max_latency": {"p95": 1}}, "provider.preferred_max_latency.p95", "is not a supported percentile"),
        ({"preferred_max_latency": {"p50": "x"}}, "provider.preferred_max_latency.p50", "must be a number"),
        ({"data_collection": "deny"}, "provider.data_collection", "'provider.data_collection' is not supported"),
    ],
)
def test_invalid_overrides_name_the_field(value: Any, param: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_preferences(value)
    assert caught.value.param == param
    assert message in caught.value.message


def test_sort_conflicting_with_the_suffix() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_preferences({"sort": "latency"}, "throughput")
    assert caught.value.param == "provider.sort"
