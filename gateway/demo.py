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
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import aiohttp
from starlette.applications import Starlette

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.demo_banner import invocation, relative_to_cwd, try_it_lines
from gateway.demo_servers import GRACE_S, Served, bind_socket, loopback_server
from gateway.demo_servers import DemoError as DemoError

# The demo's models and config live in demo_setup.py and its servers in demo_servers.py; the names
# callers imported from here still are.
from gateway.demo_setup import DEMO_MODELS as DEMO_MODELS
from gateway.demo_setup import DEMO_PREFILL_TOKENS_PER_S as DEMO_PREFILL_TOKENS_PER_S
from gateway.demo_setup import DEMO_STATS as DEMO_STATS
from gateway.demo_setup import demo_config as demo_config
from gateway.demo_setup import demo_config_data as demo_config_data
from gateway.demo_setup import served_models, with_prompt_cache
from gateway.demo_setup import write_demo_config as write_demo_config
from gateway.demo_story import LONG_TOKENS, long_answer_line
from gateway.fakes import FakeProvider
from gateway.fakes.profiles import DEMO_PROFILES, ServingFigures
from gateway.routing.explain import budgeted
from gateway.tokens import load_token_counter
from gateway.traffic import TrafficGenerator, TrafficMix, shares

TRAFFIC_WEIGHTS = (("glm-5.3-flash", 0.7), ("llama-3.3-70b", 0.3))
GATEWAY_PAGES = (("dashboard", "/dashboard"), ("metrics", "/metrics"), ("stats JSON", "/v1/gateway/stats"))
DEMO_SHORT_SHARE = 0.5
"""Half the one-off requests ask for a long answer (``gateway.demo_story.LONG_TOKENS``): there the stream's
speed outweighs the first token, so the router sends them to a fast streamer (``fading``) while short ones stay on
the quick starter (``nimble``). Once ``fading`` degrades, the quickest left (``steady``) costs 11x the cheapest, and
the balanced policy scores it, ``torrent`` and ``nimble`` within a hair of each other (``gateway.demo_story``): long
answers may then go back to ``nimble``. The status line shows where the first model's long ones went."""
STATUS_EVERY_S = 10.0
START_TIMEOUT_S = 20.0

logger = logging.getLogger("gateway.demo")


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


class Demo:
    """The running demo. ``run`` returns the exit status once everything it started has stopped."""

    def __init__(self, options: DemoOptions, out: TextIO) -> None:
        self.options = options
        self.out = out
        self.stop = asyncio.Event()
        self.started_at = time.monotonic()
        self.fakes: dict[str, FakeProvider] = {}
        self.served: list[Served] = []
        self.traffic: TrafficGenerator | None = None
        self.app: Starlette | None = None
        self._signals = 0

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)

    def _stamp(self) -> str:
        elapsed = int(time.monotonic() - self.started_at)
        return f"[{elapsed // 60}:{elapsed % 60:02d}]"

    def _on_signal(self, sig: signal.Signals) -> None:
        """The first SIGINT/SIGTERM stops gracefully; any later one stops at once. One line each, no more."""
        self._signals += 1
        self.stop.set()
        if self._signals == 1:
            self.say(
                f"{self._stamp()} stopping ({sig.name}): open requests get up to {GRACE_S}s to finish; "
                "Ctrl-C again stops at once."
            )
        elif self._signals == 2:  # stop waiting for open connections
            self.say(f"{self._stamp()} stopping at once ({sig.name} again): open requests are cut.")
            for served in self.served:
                served.server.force_exit = True

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
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
        gateway_sock = bind_socket(options.host, options.port)
        try:
            urls: dict[str, str] = {}
            for index, profile in enumerate(DEMO_PROFILES):
                seed = None if options.seed is None else options.seed * 100 + index
                behavior = with_prompt_cache(profile.figures.behavior(seed=seed), index)
                fake = FakeProvider(profile.name, behavior, models=served_models(profile))
                served = loopback_server(profile.name, fake, bind_socket("127.0.0.1", 0))
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
        self.served.append(loopback_server("gateway", app, gateway_sock, config))
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
        say(f"{self._stamp()} {long_answer_line(degraded=False)}")

    def _served(self, name: str) -> Served:
        return next(s for s in self.served if s.name == name)

    async def _serve_until_stopped(self) -> None:
        tasks: list[asyncio.Task[None]] = []
        options = self.options
        if options.traffic_per_s > 0:
            mix = TrafficMix(
                rate_per_s=options.traffic_per_s,
                models=TRAFFIC_WEIGHTS,
                conversation_share=0.3,
                tool_share=0.2,
                short_share=DEMO_SHORT_SHARE,
                long_tokens=LONG_TOKENS,
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
            self.fakes[profile.name].behavior = with_prompt_cache(profile.degraded.behavior(seed=seed), index)
            self.say(
                f"{self._stamp()} {profile.name} degrades now: {_describe_change(profile.figures, profile.degraded)}"
            )
        self.say(f"{self._stamp()} now {long_answer_line(degraded=True)}")

    async def _report_traffic(self) -> None:
        """Every ``STATUS_EVERY_S``: totals, and who served the requests answered since the last line, and why."""
        assert self.traffic is not None
        counts = self.traffic.counts
        providers, routes = Counter(counts.by_provider), Counter(counts.by_route)
        watched = DEMO_MODELS[0][0]  # the model the banner's commands use
        tools, long = Counter(counts.tools_by_provider), Counter(counts.long_by_provider[watched])
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            skipped = f", {counts.skipped} skipped at the in-flight cap" if counts.skipped else ""
            recent_providers, recent_routes = counts.by_provider - providers, counts.by_route - routes
            recent_tools = counts.tools_by_provider - tools
            providers, routes = Counter(counts.by_provider), Counter(counts.by_route)
            recent_long = counts.long_by_provider[watched] - long
            tools, long = Counter(counts.tools_by_provider), Counter(counts.long_by_provider[watched])
            self.say(
                f"{self._stamp()} traffic: {counts.sent} requests ({counts.ok} ok, {counts.failed} failed{skipped}); "
                f"last {STATUS_EVERY_S:g}s served by {shares(recent_providers)} (routes: {shares(recent_routes)}); "
                + (
                    f"long {watched} answers by {shares(recent_long)}; "
                    if recent_long
                    else f"no long {watched} answer; "
                )
                + (f"tool calls by {shares(recent_tools)}; " if recent_tools else "no tool call; ")
                + self._exploration()
            )

    def _exploration(self) -> str:
        """The gateway's own count of what it explored so far, and what its budget paid for of it, against the
        bound the router keeps (``explain.budgeted``).

        The routes above say which attempt answered: at a cold start every provider races and the
        first token wins, so ``explore`` answers many of the first requests. Those races are not
        paid by the budget (nothing is measured yet to explore away from), and this line counts them
        apart. The router pays for each race or shadow (an extra attempt) from its race budget, a
        share of streamed requests with one look to start per model; a request whose draw put another
        first costs no extra attempt and is not paid for.
        """
        if self.app is None:
            return "exploration not known yet"
        runtime = self.app.state.runtime.current
        requests = probes = paid = start = outside = cold_starts = 0
        extra = 0.0
        budget = None
        for model in runtime.config.models:
            ranking = runtime.router.rank(model)
            budget = budgeted(ranking)
            requests, probes = requests + ranking.requests, probes + ranking.probes
            paid, start, outside = paid + budget.paid, start + budget.start, outside + budget.outside
            cold_starts += ranking.cold_starts
            extra += ranking.extra_attempts * ranking.requests
        if budget is None:
            return "exploration not known yet"
        share = probes / requests if requests else 0.0
        return (
            f"explored {probes} of {requests} requests so far ({share:.1%}; {paid} paid by a budget of "
            f"{budget.share:.0%} of streamed requests{f' and {start} to start' if start else ''}, {outside} "
            f"drawn away from the leader"
            + (f"; {extra / requests:.2f} extra attempts per request" if requests else "")
            + f"), besides {cold_starts} cold-start race{'' if cold_starts == 1 else 's'}"
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
