"""A routing simulation on loopback: fake providers with known speed, latency, price and faults,
the real gateway in front of them, and the real OpenAI SDK sending traffic through it.

Why: routing is only proven by traffic. Each test states its providers (``SimProvider``), sends
requests with ``Sim.chat``, and reads what happened from the response headers, the gateway's
samples and routing events, and the fakes' own counters. The router's randomness is seeded.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig, parse_config
from gateway.events import EventLog
from gateway.fakes import FakeBehavior
from gateway.samples import SampleLog
from tests.support.fakes import Fakes, FakeServer
from tests.support.servers import ServerThread, stop_all

ADMIN_KEY = "admin-secret-for-tests"
MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]


@dataclass(frozen=True)
class SimProvider:
    name: str
    behavior: FakeBehavior
    price_in: float = 1.0
    price_out: float = 1.0
    max_concurrency: int = 256


@dataclass(frozen=True)
class Reply:
    provider: str
    route: str
    attempts: int
    ttft_s: float | None
    """Client-observed: request sent → first content chunk."""
    e2e_s: float
    text: str


def sim_config(
    providers: list[SimProvider],
    *,
    policy: dict[str, Any] | None = None,
    window_s: int = 60,
    model: str = "m",
) -> dict[str, Any]:
    return {
        "stats": {"window_s": window_s, "slice_s": 1},
        "providers": [
            {"name": p.name, "base_url": "http://placeholder", "max_concurrency": p.max_concurrency} for p in providers
        ],
        "models": [
            {
                "name": model,
                "policy": "sim",
                "deployments": [
                    {
                        "provider": p.name,
                        "model": f"{p.name}-upstream",
                        "price_in": p.price_in,
                        "price_out": p.price_out,
                    }
                    for p in providers
                ],
            }
        ],
        "policies": {"sim": {"first_token_timeout_s": 5.0, "idle_timeout_s": 5.0, **(policy or {})}},
    }


@dataclass
class Sim:
    """Fakes plus a gateway; ``stop`` ends both."""

    fakes: dict[str, FakeServer]
    gateway: ServerThread
    config: GatewayConfig
    samples: SampleLog
    events: EventLog
    client: openai.OpenAI
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        registry: Fakes,
        providers: list[SimProvider],
        *,
        policy: dict[str, Any] | None = None,
        window_s: int = 60,
        seed: int = 1,
        config_path: str | None = None,
    ) -> Sim:
        fakes = {p.name: registry.start(p.name, p.behavior) for p in providers}
        data = sim_config(providers, policy=policy, window_s=window_s)
        for provider in data["providers"]:
            provider["base_url"] = fakes[provider["name"]].base_url
        config = parse_config(data, source="sim.toml")
        samples, events = SampleLog(), EventLog()
        options = AppOptions(
            environ={"GATEWAY_ADMIN_KEY": ADMIN_KEY},
            sinks=[samples],
            rng=random.Random(seed),
            events=events,
            config_path=config_path,
        )
        gateway = ServerThread(create_app(config, options)).start()
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=20)
        return cls(fakes, gateway, config, samples, events, client)

    def stop(self) -> None:
        self.client.close()
        self.gateway.stop()

    def chat(
        self, *, max_tokens: int | None = None, stream: bool = True, model: str = "m", extra_body: Any = None
    ) -> Reply:
        started = time.perf_counter()
        raw = self.client.chat.completions.with_raw_response.create(
            model=model, messages=MESSAGES, stream=stream, max_tokens=max_tokens, extra_body=extra_body
        )
        ttft = None
        parts: list[str] = []
        parsed = raw.parse()
        if isinstance(parsed, openai.Stream):
            for chunk in parsed:
                content = chunk.choices[0].delta.content if chunk.choices else None
                if content:
                    ttft = ttft if ttft is not None else time.perf_counter() - started
                    parts.append(content)
        else:
            parts.append(parsed.choices[0].message.content or "")
        provider = raw.headers["x-gateway-provider"]
        self.counts[provider] = self.counts.get(provider, 0) + 1
        return Reply(
            provider=provider,
            route=raw.headers["x-gateway-route"],
            attempts=int(raw.headers["x-gateway-attempts"]),
            ttft_s=ttft,
            e2e_s=time.perf_counter() - started,
            text="".join(parts),
        )

    def run(self, n: int, *, max_tokens: int | None = None) -> list[Reply]:
        return [self.chat(max_tokens=max_tokens) for _ in range(n)]


def share(replies: list[Reply], provider: str) -> float:
    return sum(r.provider == provider for r in replies) / max(1, len(replies))


class Sims:
    """Starts simulations for one test; ``stop`` ends every gateway and fake at once (each takes ~0.2 s)."""

    def __init__(self, fakes: Fakes) -> None:
        self.fakes = fakes
        self.started: list[Sim] = []

    def start(
        self,
        providers: list[SimProvider],
        *,
        policy: dict[str, Any] | None = None,
        window_s: int = 60,
        seed: int = 1,
        config_path: str | None = None,
    ) -> Sim:
        sim = Sim.start(self.fakes, providers, policy=policy, window_s=window_s, seed=seed, config_path=config_path)
        self.started.append(sim)
        return sim

    def stop(self) -> None:
        for sim in self.started:
            sim.client.close()
        stop_all([sim.gateway for sim in self.started] + self.fakes.servers)


@pytest.fixture(name="sims")
def sims_fixture(fakes: Fakes) -> Iterator[Sims]:
    """Import this fixture into a test module to use it."""
    registry = Sims(fakes)
    yield registry
    registry.stop()
