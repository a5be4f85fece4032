"""A random model for property tests of reachability and eligibility: four providers speaking random APIs, and
one to ``most`` deployments spread over them, each translating or not and refusing or omitting built-in tools."""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.config import ModelConfig, parse_config


def random_model(rng: random.Random, apis: Sequence[list[str]], *, translate_share: float, most: int) -> ModelConfig:
    """Model ``m``, drawn from ``rng`` (the same draws, in the same order, as the tests that wrote it out each)."""
    providers = [{"name": f"p{i}", "base_url": "http://127.0.0.1:9/v1", "apis": rng.choice(apis)} for i in range(4)]
    deployments = [
        {
            "provider": f"p{rng.randrange(4)}",
            "model": f"u{i}",
            "name": f"d{i}",
            "translate": rng.random() < translate_share,
            "builtin_tools": rng.choice(["refuse", "omit"]),
        }
        for i in range(rng.randint(1, most))
    ]
    return parse_config({"providers": providers, "models": [{"name": "m", "deployments": deployments}]}).models[0]
