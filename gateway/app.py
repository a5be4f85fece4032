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
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import admin, api
from gateway.config import GatewayConfig, resolve_secrets
from gateway.errors import AuthenticationFailed, GatewayError, MethodNotAllowed, NotFound, PermissionDenied
from gateway.meter import Clock
from gateway.relay import Dispatcher
from gateway.reload import Reloader
from gateway.routing import MeasuredRouter, NullObserver, RoutingObserver
from gateway.samples import SampleFanout, SampleSink
from gateway.stats import StatsStore, open_stats_store
from gateway.tokens import TokenCounter, load_token_counter
from gateway.upstream import UpstreamPool


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
    """Everything built from one config. Immutable once serving; replaced whole on reload.

    ``active`` counts the requests being served on this runtime (``enter``/``leave``), so that a
    runtime replaced by a reload closes its upstream pools only once its last request is done.
    """

    config: GatewayConfig
    router: MeasuredRouter
    dispatcher: Dispatcher
    upstreams: UpstreamPool
    counter: TokenCounter
    stats: StatsStore
    """Lives as long as the process: a reloaded config keeps the same store (``[stats]`` needs a restart)."""
    client_keys: ClientKeys = field(default_factory=ClientKeys)
    admin_keys: ClientKeys = field(default_factory=ClientKeys)
    active: int = 0
    _idle: asyncio.Event | None = None

    def check_client_key(self, key: str | None) -> None:
        if not self.client_keys.check(key):
            raise AuthenticationFailed("invalid or missing API key (send 'Authorization: Bearer <key>')")

    def check_admin_key(self, key: str | None) -> None:
        if not self.admin_keys.enabled:
            name = self.config.auth.admin_key_env or "auth.admin_key_env"
            raise PermissionDenied(f"admin endpoints are disabled (set ${name} to an admin key)")
        if not key or not self.admin_keys.check(key):
            raise AuthenticationFailed("invalid or missing admin key (send 'Authorization: Bearer <admin key>')")

    def enter(self) -> None:
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0 and self._idle is not None:
            self._idle.set()

    async def drained(self) -> None:
        """Return once no request is being served on this runtime."""
        while self.active > 0:
            self._idle = asyncio.Event()
            await self._idle.wait()

    def degraded_reasons(self) -> list[str]:
        health = self.stats.health()
        return [health.reason or "stats backend degraded"] if health.degraded else []

    async def aclose(self) -> None:
        await self.upstreams.aclose()


class RuntimeHolder:
    """Holds the runtime currently serving; ``current`` is swapped atomically on reload."""

    current: GatewayRuntime
    reloader: Reloader


@dataclass(frozen=True)
class AppOptions:
    """What a caller may inject beside the config: extra sample sinks, clocks, randomness, the environment.

    ``config_path`` is the file ``POST /v1/gateway/reload`` (and SIGHUP, with
    ``reload_on_sighup``) re-reads; without it the config cannot be reloaded.
    """

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    sinks: Sequence[SampleSink] = ()
    clock: Clock | None = None
    rng: random.Random | None = None
    """The router's randomness (exploration, tie-breaks); seed it for reproducible routing."""
    observer: RoutingObserver | None = None
    """Hears routing events (decisions, fallbacks, hedges, circuits); metrics plug in here."""
    config_path: str | None = None
    reload_on_sighup: bool = False


async def build_runtime(
    config: GatewayConfig,
    options: AppOptions,
    keys: Mapping[str, str | None],
    stats: StatsStore,
    previous: GatewayRuntime | None = None,
) -> GatewayRuntime:
    """The runtime for ``config``; on reload, ``previous`` lends its router state and tokenizer."""
    if previous is not None and previous.config.stats.tokenizer == config.stats.tokenizer:
        counter = previous.counter
    else:
        counter = await asyncio.to_thread(load_token_counter, config.stats.tokenizer)
    upstreams = UpstreamPool.from_config(config, keys)
    observer = options.observer or NullObserver()
    router = MeasuredRouter(
        config,
        stats,
        state=previous.router.state if previous is not None else None,
        rng=options.rng,
        clock=options.clock or time.monotonic,
        observer=observer,
    )
    sink = SampleFanout([stats, *options.sinks])
    if options.clock is not None:
        dispatcher = Dispatcher(upstreams, router, sink, counter, clock=options.clock, observer=observer)
    else:
        dispatcher = Dispatcher(upstreams, router, sink, counter, observer=observer)
    return GatewayRuntime(
        config=config,
        router=router,
        dispatcher=dispatcher,
        upstreams=upstreams,
        counter=counter,
        stats=stats,
        client_keys=ClientKeys.from_env(config.auth.api_keys_env, options.environ),
        admin_keys=ClientKeys.from_env(config.auth.admin_key_env, options.environ),
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: GatewayError
    if exc.status_code == 405:
        error = MethodNotAllowed(f"method {request.method} not allowed on {request.url.path}")
    else:
        error = NotFound(f"no such endpoint: {request.method} {request.url.path}")
    return api.error_response(error)


def create_app(config: GatewayConfig, options: AppOptions | None = None) -> Starlette:
    """Build the gateway app for ``config``. Raises ``ConfigError`` if a provider's key is missing."""
    options = options or AppOptions()
    keys = resolve_secrets(config, options.environ)
    holder = RuntimeHolder()

    async def build(new_config: GatewayConfig, previous: GatewayRuntime) -> GatewayRuntime:
        new_keys = resolve_secrets(new_config, options.environ)
        return await build_runtime(new_config, options, new_keys, previous.stats, previous)

    holder.reloader = Reloader(holder, options.config_path, build)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stats = open_stats_store(config.stats)
        await stats.start()
        try:
            holder.current = await build_runtime(config, options, keys, stats)
            loop = asyncio.get_running_loop()
            if options.reload_on_sighup:
                loop.add_signal_handler(signal.SIGHUP, holder.reloader.reload_in_background)
            try:
                yield
            finally:
                if options.reload_on_sighup:
                    loop.remove_signal_handler(signal.SIGHUP)
                await holder.reloader.aclose()
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
        Route("/v1/gateway/routes", admin.routes, methods=["GET"]),
        Route("/v1/gateway/reload", admin.reload_config, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_exception})
    app.state.runtime = holder
    return app
