"""The application factory: config in, a Starlette app out; the lifespan owns every client.

``create_app`` does only cheap, pure work (resolving secrets from the environment, so that a
missing key fails at start-up with a clear message). The lifespan does the I/O: it loads the
tokenizer, opens the upstream connection pools, and closes them on shutdown.

The runtime built from a config (``GatewayRuntime``) sits in a ``RuntimeHolder``; a request
reads ``holder.current`` once and keeps that runtime to the end, so swapping in a new config
never disturbs a request in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import api
from gateway.accesslog import AccessLog
from gateway.config import GatewayConfig, resolve_secrets
from gateway.errors import AuthenticationFailed, GatewayError, MethodNotAllowed, NotFound
from gateway.leaderboard import InFlightCounts, no_in_flight
from gateway.meter import Clock
from gateway.metrics import Metrics, check_single_process, deployment_providers
from gateway.relay import Dispatcher
from gateway.routing import OrderedRouter, Router
from gateway.samples import SampleFanout, SampleSink
from gateway.stats import StatsStore, open_stats_store
from gateway.tokens import TokenCounter, load_token_counter
from gateway.upstream import UpstreamPool

logger = logging.getLogger("gateway")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class ClientKeys:
    """Client API keys, held only as SHA-256 digests and compared in constant time."""

    digests: tuple[bytes, ...] = ()

    @classmethod
    def from_env(cls, name: str | None, environ: Mapping[str, str]) -> ClientKeys:
        raw = environ.get(name, "") if name else ""
        return cls(tuple(_digest(k.strip()) for k in raw.split(",") if k.strip()))

    @property
    def enabled(self) -> bool:
        return bool(self.digests)

    def check(self, key: str | None) -> bool:
        if not self.digests:
            return True
        digest = _digest(key or "")
        # Compare against every key, with no early exit, so timing says nothing of which matched.
        matched = False
        for known in self.digests:
            matched |= hmac.compare_digest(digest, known)
        return matched


@dataclass
class GatewayRuntime:
    """Everything built from one config. Immutable once serving; replaced whole on reload."""

    config: GatewayConfig
    router: Router
    dispatcher: Dispatcher
    upstreams: UpstreamPool
    counter: TokenCounter
    stats: StatsStore
    """Lives as long as the process: a reloaded config keeps the same store (``[stats]`` needs a restart)."""
    client_keys: ClientKeys = field(default_factory=ClientKeys)
    access_log: AccessLog = field(default_factory=lambda: AccessLog(Metrics(process_metrics=False)))
    in_flight: InFlightCounts = no_in_flight
    """Requests in flight per (model, deployment), for the leaderboard; the router provides it."""

    def check_client_key(self, key: str | None) -> None:
        if not self.client_keys.check(key):
            raise AuthenticationFailed("invalid or missing API key (send 'Authorization: Bearer <key>')")

    def degraded_reasons(self) -> list[str]:
        health = self.stats.health()
        return [health.reason or "stats backend degraded"] if health.degraded else []

    def observe_gauges(self, metrics: Metrics) -> None:
        """Set the gauges read at scrape time from this runtime's state (called by ``GET /metrics``)."""
        for provider in self.config.providers:
            metrics.set_provider_capacity(provider.name, provider.max_concurrency)
        health = self.stats.health()
        metrics.set_stats_backend(self.config.stats.backend, not health.degraded)
        metrics.observe_dropped_total(health.dropped_samples)
        metrics.observe_snapshot(self.stats.snapshot(), deployment_providers(self.config))

    async def aclose(self) -> None:
        await self.upstreams.aclose()


class RuntimeHolder:
    """Holds the runtime currently serving; ``current`` is swapped atomically on reload."""

    current: GatewayRuntime


@dataclass(frozen=True)
class AppOptions:
    """What a caller may inject beside the config: extra sample sinks, clocks, the environment, metrics.

    ``metrics`` outlives config reloads (counters never reset); by default each app has its own.
    """

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    sinks: Sequence[SampleSink] = ()
    clock: Clock | None = None
    metrics: Metrics = field(default_factory=Metrics)


async def build_runtime(
    config: GatewayConfig, options: AppOptions, keys: Mapping[str, str | None], stats: StatsStore
) -> GatewayRuntime:
    counter = await asyncio.to_thread(load_token_counter, config.stats.tokenizer)
    upstreams = UpstreamPool.from_config(config, keys)
    router = OrderedRouter(config)
    sink = SampleFanout([stats, options.metrics, *options.sinks])
    if options.clock is not None:
        dispatcher = Dispatcher(upstreams, router, sink, counter, clock=options.clock, metrics=options.metrics)
    else:
        dispatcher = Dispatcher(upstreams, router, sink, counter, metrics=options.metrics)
    return GatewayRuntime(
        config=config,
        router=router,
        dispatcher=dispatcher,
        upstreams=upstreams,
        counter=counter,
        stats=stats,
        client_keys=ClientKeys.from_env(config.auth.api_keys_env, options.environ),
        access_log=AccessLog(options.metrics, enabled=config.server.access_log, log_bodies=config.server.log_bodies),
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: GatewayError
    if exc.status_code == 405:
        # Keep Starlette's Allow header: a 405 must say which methods the path takes.
        headers = dict(exc.headers or {})
        error = MethodNotAllowed(f"method {request.method} not allowed on {request.url.path}", headers=headers)
    else:
        error = NotFound(f"no such endpoint: {request.method} {request.url.path}")
    return api.error_response(error)


def create_app(config: GatewayConfig, options: AppOptions | None = None) -> Starlette:
    """Build the gateway app for ``config``. Raises ``ConfigError`` if a provider's key is missing."""
    options = options or AppOptions()
    check_single_process(options.environ)
    keys = resolve_secrets(config, options.environ)
    if config.server.log_bodies:
        logger.warning("server.log_bodies is on: prompts and answers are written to the access log")
    holder = RuntimeHolder()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stats = open_stats_store(config.stats)
        await stats.start()
        try:
            holder.current = await build_runtime(config, options, keys, stats)
            try:
                yield
            finally:
                await holder.current.aclose()
        finally:
            await stats.aclose()

    routes = [
        Route("/v1/chat/completions", api.ProxyEndpoint("chat", "/chat/completions"), methods=["POST"]),
        Route("/v1/completions", api.ProxyEndpoint("completions", "/completions"), methods=["POST"]),
        Route("/v1/embeddings", api.ProxyEndpoint("embeddings", "/embeddings"), methods=["POST"]),
        Route("/v1/models", api.list_models, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/readyz", api.readyz, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/v1/gateway/stats", api.gateway_stats, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_exception})
    app.state.runtime = holder
    app.state.metrics = options.metrics
    return app
