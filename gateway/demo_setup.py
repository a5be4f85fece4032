"""What the demo serves: its models, the fake providers behind each, and the gateway's config over them.

Kept apart from the running demo (``gateway.demo``) so that tests and ``--write-config`` build the
same config the demo's gateway runs on, without starting anything.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.config import GatewayConfig, parse_config
from gateway.demo_servers import DemoError
from gateway.fakes import FakeBehavior
from gateway.fakes.profiles import DEMO_PROFILES, ProviderProfile
from gateway.samples import ENDPOINTS
from gateway.toml_writer import dumps

# Client-facing model → the demo providers that serve it, in config order.
DEMO_MODELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("glm-5.3-flash", "glm-5.3-flash", ("fading", "torrent", "steady", "nimble", "bargain")),
    ("llama-3.3-70b", "llama-3.3-70b-instruct", ("bargain", "nimble", "steady")),
)
# A one-minute window so that the leaderboard shows the fading provider's decline within a minute.
DEMO_STATS = {"backend": "memory", "window_s": 60, "slice_s": 5}


def demo_config_data(fake_urls: Mapping[str, str], host: str = "127.0.0.1", port: int = 8080) -> dict[str, Any]:
    """The gateway's config over the running fakes (``name → base URL``), as the data a TOML file holds."""
    by_name = {profile.name: profile for profile in DEMO_PROFILES}
    return {
        # The demo's output is its status lines; a JSON access line per background request would drown them.
        "server": {"host": host, "port": port, "access_log": False},
        "stats": dict(DEMO_STATS),
        "providers": [
            # The fakes speak every API: Codex-style (Responses) and Claude-Code-style (Messages) clients work too.
            {"name": name, "base_url": url, "max_concurrency": 64, "apis": list(ENDPOINTS)}
            for name, url in fake_urls.items()
        ],
        "models": [
            {
                "name": model,
                "deployments": [
                    {
                        "provider": name,
                        "model": upstream,
                        "price_in": round(by_name[name].figures.price_in, 2),
                        "price_out": round(by_name[name].figures.price_out, 2),
                        # Cached input at a quarter of the price, as open-model hosts bill it.
                        "price_cached_in": round(by_name[name].figures.price_in / 4, 3),
                    }
                    for name in providers
                ],
            }
            for model, upstream, providers in DEMO_MODELS
        ],
    }


def demo_config(fake_urls: Mapping[str, str], host: str = "127.0.0.1", port: int = 8080) -> GatewayConfig:
    """``demo_config_data``, validated."""
    return parse_config(demo_config_data(fake_urls, host, port), source="<gateway demo>")


def write_demo_config(path: str, data: Mapping[str, Any]) -> None:
    """The demo's config as a TOML file that ``gateway bench -c``, ``check -c`` and ``stats -c`` read."""
    header = (
        f"Written by `gateway demo` at {time.strftime('%Y-%m-%d %H:%M:%S')}: the config of the gateway it runs.\n"
        "The simulated providers' ports change every run: this file is good while that demo runs.\n"
        "  gateway bench -c THIS_FILE -n 60 --concurrency 4   # benchmark the providers directly\n"
        "  gateway stats -c THIS_FILE                         # the demo gateway's leaderboard"
    )
    try:
        Path(path).write_text(dumps(data, header=header), encoding="utf-8")
    except OSError as exc:
        raise DemoError(f"cannot write the config to {path}: {exc.strerror or exc}") from exc


DEMO_PREFILL_TOKENS_PER_S = (20_000.0, 10_000.0, 6_000.0, 14_000.0, 8_000.0)
"""Each fake's prefill speed (by position): a conversation's long prompt is quick to start on some, slow on others."""


def with_prompt_cache(behavior: FakeBehavior, index: int) -> FakeBehavior:
    """The profile's behaviour with a prompt cache: the conversation workload shows affinity at work."""
    speed = DEMO_PREFILL_TOKENS_PER_S[index % len(DEMO_PREFILL_TOKENS_PER_S)]
    return behavior.merged({"cache_prompts": 4096, "prefill_tokens_per_s": speed})


def served_models(profile: ProviderProfile) -> tuple[str, ...]:
    return tuple(upstream for _, upstream, providers in DEMO_MODELS if profile.name in providers)
