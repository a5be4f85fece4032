"""``gateway demo``: simulated providers, the gateway in front of them, and optional traffic, in one process.

Why one process and one event loop: a newcomer runs one command and Ctrl-C stops all of it,
with nothing left behind (no child processes to reap, no ports held). Every part is a real
HTTP server on loopback (a ``uvicorn.Server`` per socket, each a task on the same loop), so the
gateway measures and routes exactly as it would in front of real providers.

The fake providers follow ``gateway.fakes.profiles``: realistic, distinct trade-offs (fast
first token but slow stream and broken tool calls, slow start but fast stream, cheap but flaky,
expensive and steady) and one, ``fading``, that turns slow and flaky after ``degrade_after_s``, so
the leaderboard and the routing visibly react. A fifth of the background requests declare a tool:
the provider that breaks tool calls loses those and keeps its plain chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import uvicorn
from starlette.applications import Starlette

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig, parse_config
from gateway.connections import ConnectionLimits, guarded_protocol
from gateway.demo_banner import invocation, relative_to_cwd, try_it_lines
from gateway.fakes import FakeBehavior, FakeProvider
from gateway.fakes.profiles import DEMO_PROFILES, ProviderProfile, ServingFigures
from gateway.samples import ENDPOINTS
from gateway.tokens import load_token_counter
from gateway.toml_writer import dumps
from gateway.traffic import TrafficGenerator, TrafficMix, shares

# Client-facing model → the demo providers that serve it, in config order.
DEMO_MODELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("glm-5.3-flash", "glm-5.3-flash", ("fading", "torrent", "steady", "nimble", "bargain")),
    ("llama-3.3-70b", "llama-3.3-70b-instruct", ("bargain", "nimble", "steady")),
)
TRAFFIC_WEIGHTS = (("glm-5.3-flash", 0.7), ("llama-3.3-70b", 0.3))
# A one-minute window so that the leaderboard shows the fading provider's decline within a minute.
DEMO_STATS = {"backend": "memory", "window_s": 60, "slice_s": 5}
GATEWAY_PAGES = (("dashboard", "/dashboard"), ("metrics", "/metrics"), ("stats JSON", "/v1/gateway/stats"))
STATUS_EVERY_S = 10.0
START_TIMEOUT_S = 20.0

logger = logging.getLogger("gateway.demo")


class DemoError(Exception):
    """The demo cannot start (port taken, tokenizer missing); the message says what to do."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    """The gateway's port (0: any free one). The fake providers always take free loopback ports."""
    traffic_per_s: float = 2.0
    """Background requests per second (0: none)."""
    duration_s: float | None = None
    """Stop by itself after this long (None: run until SIGINT/SIGTERM)."""
    degrade_after_s: float | None = 60.0
    """When ``fading`` turns slow and flaky (None: never)."""
    seed: int | None = 7
    """Seeds the providers' jitter and the traffic (None: different every run)."""
    write_config: str | None = None
    """Write the gateway's config (over the running providers) to this file, for ``gateway bench -c``."""


class _SharedLoopServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the demo: several of them share one process and loop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(slots=True)
class _Served:
    name: str
    server: _SharedLoopServer
    sock: socket.socket
    task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port


def _bind(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP, and without it Nagle holds back each small SSE write for ~40 ms.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = " (try --port 0 for any free port)" if exc.errno in (98, 48) else ""
        raise DemoError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from exc
    return sock


def _server(name: str, app: Any, sock: socket.socket, gateway: GatewayConfig | None = None) -> _Served:
    """A server on ``sock``; the gateway's (``gateway`` given) with ``gateway serve``'s connection limits."""
    config = uvicorn.Config(
        app,
        http=guarded_protocol(ConnectionLimits.from_config(gateway)) if gateway is not None else "httptools",
        ws="none",
        lifespan="on",
        access_log=False,
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=3,
    )
    if gateway is not None:
        config.timeout_keep_alive = gateway.server.keepalive_timeout_s  # type: ignore[assignment]
    return _Served(name, _SharedLoopServer(config), sock)


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


class Demo:
    """The running demo. ``run`` returns the exit status once everything it started has stopped."""

    def __init__(self, options: DemoOptions, out: TextIO) -> None:
        self.options = options
        self.out = out
        self.stop = asyncio.Event()
        self.started_at = time.monotonic()
        self.fakes: dict[str, FakeProvider] = {}
        self.served: list[_Served] = []
        self.traffic: TrafficGenerator | None = None
        self.app: Starlette | None = None
        self._signals = 0

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)

    def _stamp(self) -> str:
        elapsed = int(time.monotonic() - self.started_at)
        return f"[{elapsed // 60}:{elapsed % 60:02d}]"

    def _on_signal(self) -> None:
        self._signals += 1
        self.stop.set()
        if self._signals > 1:  # a second Ctrl-C: stop waiting for open connections
            for served in self.served:
                served.server.force_exit = True

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        try:
            await self._start()
            await self._announce()
            await self._serve_until_stopped()
        except DemoError as exc:
            print(f"gateway demo: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            await self._shutdown()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        self.say(f"{self._stamp()} stopped: the gateway and {len(self.fakes)} simulated providers are down.")
        return 0

    async def _start(self) -> None:
        options = self.options
        # A taken port fails here, with one clear line, before anything runs.
        gateway_sock = _bind(options.host, options.port)
        try:
            urls: dict[str, str] = {}
            for index, profile in enumerate(DEMO_PROFILES):
                seed = None if options.seed is None else options.seed * 100 + index
                behavior = _caching(profile.figures.behavior(seed=seed), index)
                fake = FakeProvider(profile.name, behavior, models=_served_models(profile))
                served = _server(profile.name, fake, _bind("127.0.0.1", 0))
                self.fakes[profile.name] = fake
                self.served.append(served)
                urls[profile.name] = f"http://127.0.0.1:{served.port}/v1"
            host = "127.0.0.1" if options.host in ("0.0.0.0", "") else options.host
            data = demo_config_data(urls, host, gateway_sock.getsockname()[1])
            config = parse_config(data, source="<gateway demo>")
            if options.write_config is not None:
                write_demo_config(options.write_config, data)
            # Loaded (and cached) before the gateway starts, so that a missing encoding is one clear
            # line rather than a failed lifespan.
            await asyncio.to_thread(load_token_counter, config.stats.tokenizer)
            app = create_app(config, AppOptions(environ={}))
            self.app = app
        except (DemoError, ValueError) as exc:  # ValueError: TokenizerError, ConfigError
            gateway_sock.close()
            raise DemoError(str(exc)) from exc
        self.served.append(_server("gateway", app, gateway_sock, config))
        for served in self.served:
            served.task = asyncio.create_task(served.server.serve(sockets=[served.sock]), name=served.name)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(s.server.started for s in self.served):
            failed = [s.name for s in self.served if s.task is not None and s.task.done()]
            if failed or time.monotonic() > deadline:
                raise DemoError(f"could not start: {', '.join(failed) or 'timed out'} (see the log above)")
            await asyncio.sleep(0.02)

    @property
    def gateway_url(self) -> str:
        host = "127.0.0.1" if self.options.host in ("0.0.0.0", "") else self.options.host
        return f"http://{host}:{self._served('gateway').port}"

    async def _announce(self) -> None:
        base = self.gateway_url
        available = await _available_pages(base)
        say = self.say
        say(f"gateway demo: {len(self.fakes)} simulated providers and the gateway, in this one process.")
        say()
        say(f"  OpenAI base_url  {base}/v1   (no key needed: any api_key works; also /v1/responses and /v1/messages)")
        for label, path in GATEWAY_PAGES:
            note = "" if available.get(path, False) else "   (not in this build yet)"
            say(f"  {label:<15} {base}{path}{note}")
        say()
        say(f"  {'provider':<9} {'trait':<40} {'TTFT p50':>8} {'tok/s p50':>9} {'$/1M':>6}  url")
        for profile in DEMO_PROFILES:
            figures = profile.figures
            url = f"http://127.0.0.1:{self._served(profile.name).port}/v1"
            say(
                f"  {profile.name:<9} {profile.trait:<40} {figures.ttft_p50_s:>7.2f}s {figures.tps_p50:>9.0f} "
                f"{figures.price_per_1m:>6.2f}  {url}"
            )
        say()
        models = ", ".join(model for model, _, _ in DEMO_MODELS)
        say(f"  models: {models}")
        how = invocation()
        config_file = None if self.options.write_config is None else relative_to_cwd(self.options.write_config)
        if config_file is not None:
            say(f"  config written to {config_file} (for `gateway bench -c`, `check -c`, `stats -c`)")
        say("  try it, from this folder in another terminal:")
        for line in try_it_lines(how, base, DEMO_MODELS[0][0], config_file):
            if line.startswith(f"{how.gateway} stats") and not available.get("/v1/gateway/stats", False):
                continue
            say(f"    {line}")
        if how.activate is not None:
            say(f"    (or run `{how.activate}` once: then plain `gateway ...` and `python ...` work)")
        say()
        options = self.options
        traffic = (
            f"{options.traffic_per_s:g} requests/s of background traffic" if options.traffic_per_s else "no traffic"
        )
        fading = "" if options.degrade_after_s is None else f"; fading degrades after {options.degrade_after_s:g}s"
        until = "until Ctrl-C" if options.duration_s is None else f"{options.duration_s:g} s"
        port = self._served("gateway").port
        say(
            f"  options: --traffic RATE (now {options.traffic_per_s:g}/s), --port PORT (now {port}), "
            f"--duration SECONDS (now {until}); `{how.gateway} demo --help` lists them all"
        )
        say()
        say(f"{self._stamp()} running: {traffic}{fading}. Ctrl-C stops everything.")

    def _served(self, name: str) -> _Served:
        return next(s for s in self.served if s.name == name)

    async def _serve_until_stopped(self) -> None:
        tasks: list[asyncio.Task[None]] = []
        options = self.options
        if options.traffic_per_s > 0:
            mix = TrafficMix(
                rate_per_s=options.traffic_per_s, models=TRAFFIC_WEIGHTS, conversation_share=0.3, tool_share=0.2
            )
            self.traffic = TrafficGenerator(self.gateway_url + "/v1", mix, seed=options.seed)
            tasks.append(asyncio.create_task(self.traffic.run(), name="traffic"))
            tasks.append(asyncio.create_task(self._report_traffic(), name="status"))
        if options.degrade_after_s is not None:
            tasks.append(asyncio.create_task(self._degrade_later(options.degrade_after_s), name="degrade"))
        watched = [s.task for s in self.served if s.task is not None]
        try:
            stop = asyncio.create_task(self.stop.wait())
            # A server that ends on its own (a crash) also ends the demo.
            done, _ = await asyncio.wait([stop, *watched], timeout=options.duration_s, return_when="FIRST_COMPLETED")
            stop.cancel()
            crashed = [t.get_name() for t in watched if t in done]
            if crashed:
                raise DemoError(f"{', '.join(crashed)} stopped unexpectedly")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _degrade_later(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        for index, profile in enumerate(DEMO_PROFILES):
            if profile.degraded is None:
                continue
            seed = None if self.options.seed is None else self.options.seed * 100 + 50 + index
            self.fakes[profile.name].behavior = _caching(profile.degraded.behavior(seed=seed), index)
            self.say(
                f"{self._stamp()} {profile.name} degrades now: {_describe_change(profile.figures, profile.degraded)}"
            )

    async def _report_traffic(self) -> None:
        """Every ``STATUS_EVERY_S``: totals, and who served the requests answered since the last line, and why."""
        assert self.traffic is not None
        counts = self.traffic.counts
        providers, routes = Counter(counts.by_provider), Counter(counts.by_route)
        tools = Counter(counts.tools_by_provider)
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            skipped = f", {counts.skipped} skipped at the in-flight cap" if counts.skipped else ""
            recent_providers, recent_routes = counts.by_provider - providers, counts.by_route - routes
            recent_tools = counts.tools_by_provider - tools
            providers, routes = Counter(counts.by_provider), Counter(counts.by_route)
            tools = Counter(counts.tools_by_provider)
            self.say(
                f"{self._stamp()} traffic: {counts.sent} requests ({counts.ok} ok, {counts.failed} failed{skipped}); "
                f"last {STATUS_EVERY_S:g}s served by {shares(recent_providers)} (routes: {shares(recent_routes)}); "
                f"tool calls by {shares(recent_tools)}; " + self._exploration()
            )

    def _exploration(self) -> str:
        """The gateway's own count of probes so far, as its budget counts them.

        The routes above say which attempt answered: at a cold start every provider races and the
        first token wins, so ``explore`` answers many of the first requests. Those races are not
        probes (nothing is measured yet to explore away from) and the budget does not pay for them;
        this line says what it did pay for. A first look at a deployment never measured is taken
        whatever the budget holds (which repays it later), so early on the share can pass the budget
        by those.
        """
        if self.app is None:
            return "exploration not known yet"
        runtime = self.app.state.runtime.current
        requests = probes = first_looks = cold_starts = 0
        for model in runtime.config.models:
            ranking = runtime.router.rank(model)
            requests, probes = requests + ranking.requests, probes + ranking.probes
            first_looks, cold_starts = first_looks + ranking.first_looks, cold_starts + ranking.cold_starts
        share = probes / requests if requests else 0.0
        policy = runtime.config.policy_for(runtime.config.models[0])
        looks = "first look" if first_looks == 1 else "first looks"
        return (
            f"explored {probes} of {requests} requests so far ({share:.1%}, {first_looks} of them {looks} at "
            f"deployments never measured; budget {policy.explore_share:.0%}), "
            f"besides {cold_starts} cold-start race{'' if cold_starts == 1 else 's'}"
        )

    async def _shutdown(self) -> None:
        """Stop the gateway before the fakes (its open streams end first), then wait for every server."""
        gateway = [s for s in self.served if s.name == "gateway"]
        fakes = [s for s in self.served if s.name != "gateway"]
        for group in (gateway, fakes):
            for served in group:
                served.server.should_exit = True
            for served in group:
                if served.task is not None:
                    with contextlib.suppress(asyncio.CancelledError, SystemExit):
                        await served.task
                served.sock.close()


DEMO_PREFILL_TOKENS_PER_S = (20_000.0, 10_000.0, 6_000.0, 14_000.0, 8_000.0)
"""Each fake's prefill speed (by position): a conversation's long prompt is quick to start on some, slow on others."""


def _caching(behavior: FakeBehavior, index: int) -> FakeBehavior:
    """The profile's behaviour with a prompt cache: the conversation workload shows affinity at work."""
    speed = DEMO_PREFILL_TOKENS_PER_S[index % len(DEMO_PREFILL_TOKENS_PER_S)]
    return behavior.merged({"cache_prompts": 4096, "prefill_tokens_per_s": speed})


def _served_models(profile: ProviderProfile) -> tuple[str, ...]:
    return tuple(upstream for _, upstream, providers in DEMO_MODELS if profile.name in providers)


def _describe_change(before: ServingFigures, after: ServingFigures) -> str:
    return (
        f"TTFT p50 {before.ttft_p50_s:.2f}s → {after.ttft_p50_s:.2f}s, "
        f"tokens/s p50 {before.tps_p50:.0f} → {after.tps_p50:.0f}, errors {after.error_rate:.0%}"
    )


async def _available_pages(base: str) -> dict[str, bool]:
    """Which of the gateway's own pages this build serves (they land from separate work)."""
    found: dict[str, bool] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for _, path in GATEWAY_PAGES:
            try:
                async with session.get(base + path) as response:
                    found[path] = response.status != 404
            except (aiohttp.ClientError, TimeoutError):
                found[path] = False
    return found


def run_demo(options: DemoOptions, out: TextIO = sys.stdout) -> int:
    """Run the demo on uvloop (when installed) until stopped; the process's exit status."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # uvloop does not exist on Windows: the standard loop works, just slower
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(Demo(options, out).run())
