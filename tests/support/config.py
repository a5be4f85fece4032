"""The one config builder of the tests: a model deployed on the given providers, with overrides.

Why: most tests need "model ``m`` on these providers, with this policy"; each states only what
differs (a policy key, a deployment's option, a provider's setting, another section).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gateway.config import GatewayConfig, parse_config


class Upstream(Protocol):
    """Anything served on loopback that a provider can point at (a fake, a raw upstream)."""

    @property
    def name(self) -> str: ...

    @property
    def base_url(self) -> str: ...


# A policy for tests of the attempt loop: config order, no exploration, short timeouts.
ATTEMPT_POLICY: dict[str, Any] = {"extends": "fixed-order", "first_token_timeout_s": 5.0, "idle_timeout_s": 5.0}


def gateway_config(
    providers: Sequence[Upstream | str],
    *,
    model: str = "m",
    policy: Mapping[str, Any] | None = None,
    base_policy: Mapping[str, Any] = ATTEMPT_POLICY,
    deployments: Mapping[str, Mapping[str, Any]] | None = None,
    provider_options: Mapping[str, Mapping[str, Any]] | None = None,
    max_concurrency: int | None = 256,
    extra: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    """``model`` deployed on each provider in order, under policy ``test`` (``base_policy`` + ``policy``).

    A provider given as a bare name points at a closed loopback port (for tests that never send);
    ``max_concurrency=None`` gives the providers no ceiling (the gateway learns their limits).
    ``deployments`` / ``provider_options`` add keys to the deployment on / the provider of the named
    provider, e.g. ``{"b": {"continue_prefill": True}}``; ``extra`` sets whole top-level sections.
    """
    named = [(p, f"http://127.0.0.1:9/{p}") if isinstance(p, str) else (p.name, p.base_url) for p in providers]
    data: dict[str, Any] = {
        "providers": [
            {
                "name": name,
                "base_url": url,
                **({"max_concurrency": max_concurrency} if max_concurrency is not None else {}),
                **(provider_options or {}).get(name, {}),
            }
            for name, url in named
        ],
        "models": [
            {
                "name": model,
                "policy": "test",
                "deployments": [
                    {
                        "provider": name,
                        "model": f"{name}-upstream",
                        "price_in": 1.0,
                        "price_out": 2.0,
                        **(deployments or {}).get(name, {}),
                    }
                    for name, _ in named
                ],
            }
        ],
        "policies": {"test": {**base_policy, **(policy or {})}},
    }
    data.update(extra or {})
    return parse_config(data, source="test.toml")


def routing_config(
    deployments: list[tuple[str, float, float]],
    *,
    policy: dict[str, Any] | None = None,
    max_concurrency: int = 64,
    model: str = "m",
) -> GatewayConfig:
    """One model on one (never contacted) provider per ``(name, price_in, price_out)``, under a measured
    policy (the built-in default plus ``policy``): for the router's and the score's unit tests."""
    return gateway_config(
        [name for name, _, _ in deployments],
        model=model,
        policy=policy,
        base_policy={},
        deployments={name: {"price_in": price_in, "price_out": price_out} for name, price_in, price_out in deployments},
        max_concurrency=max_concurrency,
    )
