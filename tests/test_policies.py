"""Policies in the config: presets, ``extends``, every key validated with a precise error."""

from __future__ import annotations

import tomllib

import pytest

from gateway.config import ConfigError, parse_config
from gateway.policies import BUILTIN_POLICIES, PolicyConfig

BASE = """
[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"

[[models]]
name = "m"
policy = "p"
  [[models.deployments]]
  provider = "a"
  model = "a-model"
"""


def load(policies: str) -> dict[str, PolicyConfig]:
    return dict(parse_config(tomllib.loads(BASE + policies), source="config.toml").policies)


def test_presets_exist_and_differ_in_what_they_optimise() -> None:
    assert set(BUILTIN_POLICIES) >= {"balanced", "fastest-first-token", "highest-throughput", "cheapest", "fixed-order"}
    assert BUILTIN_POLICIES["balanced"] == PolicyConfig(name="balanced", hedge_tail=True)
    assert BUILTIN_POLICIES["fastest-first-token"].ttft_weight == 1.0
    assert BUILTIN_POLICIES["fastest-first-token"].hedging
    assert BUILTIN_POLICIES["highest-throughput"].throughput_weight == 1.0
    assert BUILTIN_POLICIES["cheapest"].price_weight == 1.0
    assert BUILTIN_POLICIES["fixed-order"].ranking == "fixed"
    # Balanced hedges only where a first-token tail is heavy; time-led presets count failures in time.
    assert BUILTIN_POLICIES["balanced"].hedging and BUILTIN_POLICIES["balanced"].hedge_quantile is None
    assert BUILTIN_POLICIES["balanced"].failure_weight < BUILTIN_POLICIES["fastest-first-token"].failure_weight


def test_a_policy_starts_from_balanced_or_from_what_it_extends() -> None:
    policies = load(
        """
[policies.p]
extends = "cheapest"
max_ttft_s = 2
explore_share = 0.1
hedge_quantile = 0.95

[policies.q]
extends = "p"
price_weight = 0.5

[policies.plain]
min_samples = 3
"""
    )
    p = policies["p"]
    assert (p.name, p.price_weight, p.max_ttft_s, p.explore_share, p.hedge_quantile) == ("p", 1.0, 2.0, 0.1, 0.95)
    assert policies["q"].max_ttft_s == 2.0 and policies["q"].price_weight == 0.5
    assert policies["plain"] == PolicyConfig(name="plain", min_samples=3, hedge_tail=True)


def test_a_table_named_like_a_preset_adjusts_it() -> None:
    policies = load('[policies.cheapest]\nmax_attempts = 1\n[policies.p]\nextends = "cheapest"\n')
    assert policies["cheapest"].max_attempts == 1 and policies["cheapest"].price_weight == 1.0
    assert policies["p"].max_attempts == 1


def test_hedge_after_forms() -> None:
    policies = load('[policies.p]\nhedge_after_s = 1.5\n[policies.q]\nextends = "p"\nhedge_after_s = false\n')
    assert policies["p"].hedge_after_s == 1.5 and policies["p"].hedge_quantile is None
    assert not policies["q"].hedging
    switched = load('[policies.p]\nextends = "fastest-first-token"\nhedge_after_s = 2\n')["p"]
    assert (switched.hedge_after_s, switched.hedge_quantile) == (2.0, None)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('extends = "fast"', 'policies.p.extends: unknown policy "fast" (known: balanced, fastest,'),
        ('ranking = "random"', "policies.p.ranking: expected one of 'measured', 'fixed', got \"random\""),
        ('estimate = "median"', "policies.p.estimate: expected one of 'mean', 'quantile', got \"median\""),
        ("time_weight = -1", "policies.p.time_weight: expected a number >= 0.0, got -1"),
        ('price_weight = "high"', 'policies.p.price_weight: expected a number, got "high"'),
        ("ttft_quantile = 1.0", "policies.p.ttft_quantile: expected a number between 0 and 1 (exclusive), got 1"),
        ("tps_quantile = 0", "policies.p.tps_quantile: expected a number between 0 and 1 (exclusive), got 0"),
        ("explore_share = 1", "policies.p.explore_share: expected a share below 1"),
        ("hedge_budget = 1.5", "policies.p.hedge_budget: expected a share between 0 and 1, got 1.5"),
        ("min_success_rate = 2", "policies.p.min_success_rate: expected a share between 0 and 1, got 2"),
        ("min_samples = -1", "policies.p.min_samples: expected an integer >= 0, got -1"),
        ("failure_threshold = 0", "policies.p.failure_threshold: expected an integer >= 1, got 0"),
        ("cooldown_s = 0", "policies.p.cooldown_s: expected a number > 0, got 0"),
        ("cooldown_s = 60\nmax_cooldown_s = 10", "policies.p.max_cooldown_s: expected at least cooldown_s (60)"),
        ("min_tokens_per_s = 0", "policies.p.min_tokens_per_s: expected a number > 0, got 0"),
        ("hedge_quantile = 1.5", "policies.p.hedge_quantile: expected a number between 0 and 1 (exclusive), or false"),
        ("hedge_after_s = -1", "policies.p.hedge_after_s: expected a number of seconds > 0, or false, got -1"),
        ("hedge_after_s = true", "policies.p.hedge_after_s: expected a number of seconds > 0, or false, got True"),
        ("hedge_after_s = 1\nhedge_quantile = 0.9", "policies.p.hedge_quantile: set either hedge_after_s or"),
        (
            "time_weight = 0\nprice_weight = 0",
            "policies.p.time_weight: a measured policy needs at least one of time, ttft, throughput, price weights > 0",
        ),
        ("max_atempts = 2", "policies.p.max_atempts: unknown key (expected one of:"),
    ],
)
def test_invalid_policy_keys_name_the_key(table: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load("[policies.p]\n" + table + "\n")
    assert str(caught.value).startswith("config.toml: " + message), str(caught.value)


def test_a_model_naming_an_unknown_policy() -> None:
    with pytest.raises(ConfigError, match=r'models\[0\]\.policy: unknown policy "p" \(known: balanced, fastest'):
        parse_config(tomllib.loads(BASE), source="config.toml")
