"""Hot reload: re-read the config file, build a new runtime, swap it in atomically.

Triggered by ``POST /v1/gateway/reload`` (admin) or SIGHUP. The new config is validated in
full and its runtime built *before* the swap; anything wrong (a typo, an unknown provider, a
missing key) refuses the reload with the error and the old runtime keeps serving. Any other
failure (a bug, the machine) is said once in the log, in words, raised as ``ReloadFailed``, and
likewise changes nothing: the reload after it starts afresh. A request
reads ``holder.current`` once when it starts, so requests in flight finish on the runtime
they started with; that runtime's upstream pools are closed only after its last request is
done. The stats store and the router's state (in-flight counts, circuits, hedge budgets) carry
over: they describe the providers, not the config.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from gateway.background import log_failure
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.errors import clip
from gateway.runtime import GatewayRuntime, RuntimeHolder
from gateway.tokens import TokenizerError

logger = logging.getLogger("gateway")

Build = Callable[[GatewayConfig, GatewayRuntime], Awaitable[GatewayRuntime]]

REFUSALS = (ConfigError, TokenizerError)
"""What a reload refuses in the config's own words: the config (or what it names) is at fault."""


class ReloadFailed(Exception):
    """A reload failed for a reason other than the config's content; the message says what, in one line.

    Already logged when raised: the caller only answers (``POST /v1/gateway/reload``) or stays quiet (SIGHUP).
    """


class Reloader:
    """Reloads ``path`` into ``holder``; one reload at a time. Owned by the app's lifespan (``aclose``)."""

    def __init__(self, holder: RuntimeHolder, path: str | None, build: Build) -> None:
        self.holder = holder
        self.path = path
        self.build = build
        self.reloads = 0
        self._lock = asyncio.Lock()
        self._retiring: set[asyncio.Task[None]] = set()
        self._signalled: set[asyncio.Task[None]] = set()

    async def reload(self) -> GatewayRuntime:
        """Swap in the config file's current content. Changes nothing if it raises: ``ConfigError`` (or
        ``TokenizerError``) when the config is invalid, ``ReloadFailed`` when anything else went wrong."""
        if self.path is None:
            raise ConfigError("this gateway was not started from a config file: there is nothing to reload")
        async with self._lock:
            try:
                config = await asyncio.to_thread(load_config, Path(self.path))
                old = self.holder.current
                _check_restart_only(old.config, config)
                new = await self.build(config, old)
            except REFUSALS:
                raise
            except Exception as exc:
                # The outermost handler of a reload: nothing has been swapped yet, so the old config stays whole.
                words = f"{type(exc).__name__}: {clip(str(exc))}" if str(exc) else type(exc).__name__
                logger.error("config reload failed, the previous config keeps serving: %s", words)
                raise ReloadFailed(words) from exc
            self.holder.current = new
            self.reloads += 1
            task = asyncio.ensure_future(self._retire(old))
            task.add_done_callback(log_failure("closing the previous config's runtime"))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
            return new

    def reload_in_background(self) -> None:
        """For a signal handler: reload, and log the outcome (there is nobody to answer)."""
        # Held until done: the loop keeps only a weak reference to a task.
        task = asyncio.ensure_future(self._reload_and_log())
        task.add_done_callback(log_failure("config reload"))
        self._signalled.add(task)
        task.add_done_callback(self._signalled.discard)

    async def _reload_and_log(self) -> None:
        try:
            new = await self.reload()
        except REFUSALS as exc:
            logger.error("config reload refused, the previous config keeps serving: %s", exc)
            return
        except ReloadFailed:
            return  # said in the log where it was raised
        logger.info("config reloaded from %s (%d models)", self.path, len(new.config.models))

    @staticmethod
    async def _retire(old: GatewayRuntime) -> None:
        try:
            await old.requests.drained()
        finally:
            await old.aclose()

    async def aclose(self) -> None:
        """At shutdown: close the runtimes still draining (the lifespan closes the current one)."""
        tasks = list(self._retiring)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


_FIXED_AT_START = (
    "header_timeout_s",
    "body_timeout_s",
    "max_connections",
    "keepalive_timeout_s",
    "shutdown_grace_s",
    "trusted_proxies",
    "workers",
)
"""``[server]`` keys the listener (uvicorn and the guarded protocol) or the supervisor took when they started."""


def _check_restart_only(old: GatewayConfig, new: GatewayConfig) -> None:
    """Refuse changes that a running process cannot apply, rather than pretend they took effect."""
    if new.stats != old.stats:
        raise ConfigError(f"{new.source}: stats: changing [stats] needs a restart (the stats store outlives reloads)")
    if (new.server.host, new.server.port) != (old.server.host, old.server.port):
        raise ConfigError(f"{new.source}: server: changing server.host or server.port needs a restart")
    for name in _FIXED_AT_START:
        if getattr(new.server, name) != getattr(old.server, name):
            raise ConfigError(f"{new.source}: server.{name}: changing server.{name} needs a restart")
    if old.canary is None and new.canary is not None:
        # Its task starts with the process when [canary] is there (a reload may change or remove it).
        raise ConfigError(f"{new.source}: canary: adding [canary] needs a restart")
    if new.limits.max_header_bytes != old.limits.max_header_bytes:
        raise ConfigError(
            f"{new.source}: limits.max_header_bytes: changing limits.max_header_bytes needs a restart "
            "(the listener enforces it)"
        )


def reloader_of(scope: Mapping[str, Any]) -> Reloader:
    """The app's ``Reloader``, from a request's ASGI scope (``POST /v1/gateway/reload``)."""
    reloader = scope["app"].state.reloader
    if not isinstance(reloader, Reloader):
        raise TypeError("this app has no reloader (it was not built by gateway.app.create_app)")
    return reloader
