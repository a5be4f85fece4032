"""Builders for routing unit tests: configs with several deployments, and samples with known numbers.

Why: the score and the router are pure functions of a config, a stats snapshot and a request;
these helpers make each test state exactly the providers and measurements it is about.
"""

from __future__ import annotations

from typing import Any

from gateway.config import GatewayConfig, parse_config
from gateway.samples import Outcome, Sample


def routing_config(
    deployments: list[tuple[str, float, float]],
    *,
    policy: dict[str, Any] | None = None,
    max_concurrency: int = 64,
    model: str = "m",
) -> GatewayConfig:
    """One model on one provider per ``(name, price_in, price_out)``, under policy ``p``."""
    data: dict[str, Any] = {
        "providers": [
            {"name": name, "base_url": f"http://127.0.0.1:9/{name}", "max_concurrency": max_concurrency}
            for name, _, _ in deployments
        ],
        "models": [
            {
                "name": model,
                "policy": "p",
                "deployments": [
                    {"provider": name, "model": f"{name}-model", "price_in": price_in, "price_out": price_out}
                    for name, price_in, price_out in deployments
                ],
            }
        ],
        "policies": {"p": policy or {}},
    }
    return parse_config(data, source="test.toml")


def sample(
    deployment: str,
    *,
    ttft: float | None = 0.5,
    tps: float | None = 100.0,
    tokens: int | None = 100,
    outcome: Outcome = "ok",
    model: str = "m",
    started_at: float = 1000.0,
    e2e: float | None = None,
) -> Sample:
    return Sample(
        model=model,
        deployment=deployment,
        provider=deployment,
        endpoint="chat",
        stream=True,
        outcome=outcome,
        started_at=started_at,
        ttft_s=ttft if outcome == "ok" else None,
        tokens_per_s=tps if outcome == "ok" else None,
        output_tokens=tokens if outcome == "ok" else None,
        e2e_s=e2e,
    )


def samples(
    deployment: str,
    n: int,
    *,
    ttft: float | None = 0.5,
    tps: float | None = 100.0,
    tokens: int | None = 100,
    outcome: Outcome = "ok",
    started_at: float = 1000.0,
) -> list[Sample]:
    return [
        sample(deployment, ttft=ttft, tps=tps, tokens=tokens, outcome=outcome, started_at=started_at) for _ in range(n)
    ]
