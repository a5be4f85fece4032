"""The ``gateway`` command: serve, check, stats, spend, and the fake provider.

Start-up failures are operator errors: one clear line on stderr, exit status 1, no traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Literal

from gateway import __version__
from gateway.cli_help import DESCRIPTION, QUICK_START, HelpFormatter, epilog
from gateway.config import ConfigError, GatewayConfig, RedisMode, StatsConfig, load_config, resolve_secrets
from gateway.tables import format_table
from gateway.tokens import TokenizerError, load_token_counter

DEFAULT_CONFIG_ENV = "GATEWAY_CONFIG"


def _fail(message: str) -> int:
    print(f"gateway: {message}", file=sys.stderr)
    return 1


def _config_path(args: argparse.Namespace) -> str | None:
    path: str | None = args.config or os.environ.get(DEFAULT_CONFIG_ENV)
    return path


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.accesslog import configure_access_log
    from gateway.app import AppOptions, create_app
    from gateway.auth import exposure_notice, load_keys
    from gateway.metrics import WORKER_ENV
    from gateway.server import run, uvicorn_config
    from gateway.supervisor import MULTIPROC_ENV, WorkerSpec, resolve_workers, serve_workers

    path = _config_path(args)
    if path is None:
        return _fail("no config given: use -c FILE (or set GATEWAY_CONFIG), or try `gateway demo`")
    host = args.host
    try:
        config = load_config(path)
        host = host or config.server.host
        workers = resolve_workers(args.workers if args.workers is not None else config.server.workers)
        ring, admin = load_keys(config, os.environ)
        level, notice = exposure_notice(host, ring, admin, config.auth)
        # Several workers: each builds its own app; this one only checks that they will be able to.
        environ = {k: v for k, v in os.environ.items() if k not in (MULTIPROC_ENV, WORKER_ENV)} if workers > 1 else None
        options = AppOptions(config_path=path, reload_on_sighup=True, client_keys=(ring, admin))
        app = create_app(config, options if environ is None else AppOptions(environ=environ, client_keys=(ring, admin)))
        # Loaded here so that a bad tokenizer is one clear line, not a traceback from the lifespan;
        # the lifespan then finds it in the per-process cache.
        load_token_counter(config.stats.tokenizer)
    except (ConfigError, TokenizerError) as exc:
        return _fail(str(exc))
    port = args.port if args.port is not None else config.server.port
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    configure_access_log()
    logging.getLogger("gateway.auth").log(level, notice)
    if workers > 1:
        try:
            return serve_workers(WorkerSpec(path, host, port, args.log_level, workers), config, os.environ)
        except OSError as exc:
            return _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    return run(uvicorn.Server(uvicorn_config(app, config, host, port, args.log_level)))


def _workers(value: str) -> int | Literal["auto"]:
    """``--workers``: a count of at least 1, or ``auto``."""
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f'expected a number of workers >= 1 or "auto", got "{value}"')
    return int(value)


def routing_table(config: GatewayConfig, environ: dict[str, str]) -> str:
    """The resolved model → deployments table; key variables shown as set/missing, never their values."""
    header = ["model", "policy", "#", "deployment", "provider", "upstream model", "in $/1M", "out $/1M", "key"]
    rows = []
    for model in config.models:
        for index, deployment in enumerate(model.deployments, start=1):
            provider = config.provider(deployment.provider)
            if provider.api_key_env is None:
                key = "none"
            else:
                key = f"${provider.api_key_env} " + ("set" if environ.get(provider.api_key_env) else "MISSING")
            rows.append(
                [
                    model.name if index == 1 else "",
                    model.policy if index == 1 else "",
                    str(index),
                    deployment.name,
                    provider.name,
                    deployment.model,
                    f"{deployment.price_in:g}",
                    f"{deployment.price_out:g}",
                    key,
                ]
            )
    return format_table(header, rows)


def cold_rankings(config: GatewayConfig) -> str:
    """Each model's ranking as a freshly started gateway sees it: prices and policy, nothing measured yet.

    ``GET /v1/gateway/routes`` shows the same with live measurements.
    """
    from gateway.routing.explain import ranking_table
    from gateway.routing.serving import build_router, router_kind
    from gateway.stats import InMemoryStatsStore

    kind = router_kind(os.environ)
    router = build_router(kind, config, InMemoryStatsStore(config.stats))
    tables = [ranking_table(router.rank(model)) for model in config.models]
    return "Current ranking (no measurements yet: live ones at GET /v1/gateway/routes)\n\n" + "\n\n".join(tables)


def counted(count: int, noun: str) -> str:
    """``1 provider``, ``2 providers``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cmd_check(args: argparse.Namespace) -> int:
    """Validate in full (config, keys, tokenizer), print what was found, and say "valid" only if all of it passed."""
    path = _config_path(args)
    if path is None:
        return _fail("no config given: use -c FILE")
    try:
        config = load_config(path)
    except ConfigError as exc:
        return _fail(str(exc))
    environ = dict(os.environ)
    print(f"{path}: {counted(len(config.providers), 'provider')}, {counted(len(config.models), 'model')}")
    print()
    print(routing_table(config, environ))
    try:
        summary = auth_summary(config, environ)
        resolve_secrets(config, environ)
        if config.stats.backend == "redis":
            from gateway.redis_client import resolve_redis_secrets

            resolve_redis_secrets(config.stats, environ, config.source)
            print(f"stats: redis at {config.stats.redis_target}")
        load_token_counter(config.stats.tokenizer)
    except (ConfigError, TokenizerError) as exc:
        print()
        return _fail(str(exc))
    print()
    print(summary)
    print()
    print(cold_rankings(config))
    print()
    print(f"{path}: valid (config, provider keys, client and admin keys, tokenizer {config.stats.tokenizer})")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """The leaderboard, from a running gateway (``--url``) or straight from Redis (``--redis``)."""
    import asyncio
    import dataclasses
    import json

    import httpx

    from gateway.leaderboard import (
        LeaderboardRow,
        leaderboard,
        leaderboard_json,
        render_compact,
        render_csv,
        render_table,
    )
    from gateway.redis_client import REDIS_ERRORS
    from gateway.stats import StoreHealth
    from gateway.stats.redis_store import read_shared_snapshot

    path = _config_path(args)
    try:
        config = load_config(path) if path else None
    except ConfigError as exc:
        return _fail(str(exc))
    if args.redis is not None:
        stats = config.stats if config else StatsConfig()
        stats = dataclasses.replace(
            stats,
            backend="redis",
            key_prefix=args.prefix or stats.key_prefix,
            window_s=args.window or stats.window_s,
            slice_s=args.slice or stats.slice_s,
        )
        if args.redis:
            # A URL names one server, or a cluster's seed node when the config says cluster.
            mode: RedisMode = "cluster" if stats.redis_mode == "cluster" else "standalone"
            stats = dataclasses.replace(stats, redis_url=args.redis, redis_mode=mode)
        if stats.window_s % stats.slice_s:
            return _fail(f"--window ({stats.window_s}) must be a multiple of --slice ({stats.slice_s})")
        try:
            snapshot = asyncio.run(read_shared_snapshot(stats))
        except ConfigError as exc:
            return _fail(str(exc))
        except REDIS_ERRORS as exc:
            return _fail(f"cannot read stats from {stats.redis_target}: {exc}")
        rows = leaderboard(snapshot, config.models if config else ())
        document = leaderboard_json(
            rows, window_s=stats.window_s, taken_at=snapshot.taken_at, backend="redis", health=StoreHealth()
        )
    else:
        base = args.url or (f"http://{config.server.host}:{config.server.port}" if config else "http://127.0.0.1:8080")
        api_key = args.api_key or os.environ.get("GATEWAY_API_KEY")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            response = httpx.get(base.rstrip("/") + "/v1/gateway/stats", headers=headers, timeout=10.0)
        except httpx.HTTPError as exc:
            return _fail(f"cannot reach the gateway at {base}: {exc}")
        if response.status_code != 200:
            return _fail(f"{base} answered {response.status_code}: {response.text[:300]}")
        document = response.json()
        rows = [LeaderboardRow.from_json(row) for row in document["data"]]
    if args.json:
        print(json.dumps(document, indent=2))
    elif args.csv:
        print(render_csv(rows), end="")
    else:
        store = document["store"]
        state = f"degraded: {store['reason']}" if store["degraded"] else "ok"
        print(f"window {document['window_s']} s, {store['backend']} store ({state})")
        print()
        print(render_table(rows) if args.wide else render_compact(rows))
        if not any(row.samples for row in rows):
            print()
            print(f"no samples yet in the last {document['window_s']} s: the table fills as requests are answered")
    return 0


def cmd_spend(args: argparse.Namespace) -> int:
    """Where the money went, from a running gateway's ``GET /v1/gateway/spend`` (admin key)."""
    import json

    import httpx

    from gateway.spending.report import render_csv, render_table

    path = _config_path(args)
    try:
        config = load_config(path) if path else None
    except ConfigError as exc:
        return _fail(str(exc))
    base = args.url or (f"http://{config.server.host}:{config.server.port}" if config else "http://127.0.0.1:8080")
    variable = config.auth.admin_key_env if config and config.auth.admin_key_env else "GATEWAY_ADMIN_KEY"
    admin_key = args.admin_key or os.environ.get(variable)
    if not admin_key:
        return _fail(f"spend needs the gateway's admin key: pass --admin-key or set ${variable}")
    params = {"window": args.window, **({"by": args.by} if args.by else {})}
    try:
        response = httpx.get(
            base.rstrip("/") + "/v1/gateway/spend",
            params=params,
            headers={"authorization": f"Bearer {admin_key}"},
            timeout=10.0,
        )
    except httpx.HTTPError as exc:
        return _fail(f"cannot reach the gateway at {base}: {exc}")
    if response.status_code != 200:
        return _fail(f"{base} answered {response.status_code}: {response.text[:300]}")
    document = response.json()
    if args.json:
        print(json.dumps(document, indent=2))
    elif args.csv:
        print(render_csv(document), end="")
    else:
        print(render_table(document))
    return 0


def auth_summary(config: GatewayConfig, environ: dict[str, str]) -> str:
    """Who may call the gateway, as counts and variable names: never a key. Raises ``ConfigError``."""
    from gateway.auth import load_keys

    ring, admin = load_keys(config, environ)
    if ring.enabled:
        clients = ring.describe()
    elif config.auth.allow_unauthenticated:
        clients = "no client keys: open to anyone (allow_unauthenticated = true)"
    else:
        clients = "no client keys: loopback clients only"
    variable = f"${config.auth.admin_key_env}" if config.auth.admin_key_env else "[auth] admin_key_env"
    # As ``AccessControl.require_admin`` decides: the admin key when there is one; without it,
    # loopback callers while there are no client keys, and nobody once there are.
    if admin.configured:
        admin_text = f"admin key {variable} set"
    elif ring.enabled:
        admin_text = f"admin endpoints: disabled (set {variable} to enable them)"
    else:
        admin_text = f"admin endpoints: loopback only (no admin key; set {variable} to require one)"
    return f"auth: {clients}; {admin_text}"


def cmd_fake_provider(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.fakes import FakeBehavior, FakeProvider

    behavior = FakeBehavior(
        ttft_s=args.ttft,
        tokens_per_s=args.tps,
        output_tokens=args.tokens,
        status=args.status,
        error_rate=args.error_rate,
        ttft_jitter=args.jitter,
        tps_jitter=args.jitter,
        seed=args.seed,
    )
    app = FakeProvider(args.name, behavior)
    uvicorn.run(
        app, host=args.host, port=args.port, loop="uvloop", http="httptools", access_log=False, log_level="warning"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import DemoOptions, run_demo

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = DemoOptions(
        host=args.host,
        port=args.port,
        traffic_per_s=args.traffic,
        duration_s=args.duration,
        degrade_after_s=None if args.degrade_after < 0 else args.degrade_after,
        seed=args.seed,
        write_config=args.write_config,
    )
    try:
        return run_demo(options)
    except KeyboardInterrupt:  # Ctrl-C before the demo took over the signal (while starting up)
        return 130


def cmd_bench(args: argparse.Namespace) -> int:
    from gateway.bench import BenchOptions, BenchSettings, run_bench_command

    if args.requests < 1 or args.concurrency < 1 or args.max_tokens < 1 or args.timeout <= 0:
        return _fail("bench: -n, --concurrency, --max-tokens and --timeout must be positive")
    options = BenchOptions(
        config_path=_config_path(args),
        url=args.url,
        models=tuple(args.model or ()),
        settings=BenchSettings(
            requests=args.requests,
            concurrency=args.concurrency,
            max_tokens=args.max_tokens,
            timeout_s=args.timeout,
            api=args.api,
        ),
        prompts_path=args.prompts,
        out_prefix=args.out,
        seed_stats=args.seed_stats,
        api_key_env=args.api_key_env,
        tasks=args.tasks is not None,
        tasks_path=args.tasks or None,
    )
    return run_bench_command(options, dict(os.environ), sys.stdout)


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name, help=summary, description=summary[0].upper() + summary[1:] + ".", epilog=epilog(name),
        formatter_class=HelpFormatter,
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description=DESCRIPTION, epilog=QUICK_START, formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>")
    config_help = f"the TOML config (default: ${DEFAULT_CONFIG_ENV})"

    serve = _command(commands, "serve", "run the gateway")
    serve.add_argument("-c", "--config", metavar="FILE", help=config_help)
    serve.add_argument("--host", help="listen on this address (default: the config's server.host)")
    serve.add_argument("--port", type=int, help="listen on this port (default: the config's server.port)")
    serve.add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        help='worker processes on the port, each a full replica; "auto": one per core (default: server.workers)',
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level",
    )
    serve.set_defaults(func=cmd_serve)

    check = _command(commands, "check", "validate a config and print the routing table and each model's ranking")
    check.add_argument("-c", "--config", metavar="FILE", help=config_help)
    check.set_defaults(func=cmd_check)

    stats = _command(commands, "stats", "print the live leaderboard of a running gateway or of a Redis")
    stats.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help=f"a config: the gateway's address, or the Redis key layout and prices (default: ${DEFAULT_CONFIG_ENV})",
    )
    source = stats.add_mutually_exclusive_group()
    source.add_argument("--url", help="a running gateway (default: the config's server, else http://127.0.0.1:8080)")
    source.add_argument(
        "--redis",
        metavar="URL",
        nargs="?",
        const="",
        help="read the shared stats straight from Redis: this URL, or with no URL the config's Redis "
        "(standalone, cluster or sentinel) (default: ask the gateway, --url)",
    )
    stats.add_argument("--prefix", help="with --redis: the stats key prefix (default: the config's, else gateway)")
    stats.add_argument("--window", type=int, help="with --redis: window in seconds (default: the config's, else 300)")
    stats.add_argument(
        "--slice", type=int, help="with --redis: slice width in seconds (default: the config's, else 10)"
    )
    stats.add_argument("--api-key", help="a client key for the gateway (default: $GATEWAY_API_KEY)")
    output = stats.add_mutually_exclusive_group()
    output.add_argument("--wide", action="store_true", help="every column (default: a table that fits 100 columns)")
    output.add_argument("--json", action="store_true", help="print the JSON document instead of a table")
    output.add_argument("--csv", action="store_true", help="print CSV rows (raw values) instead of a table")
    stats.set_defaults(func=cmd_stats)

    spend = _command(commands, "spend", "print what each key, team, model and provider spent (admin key)")
    spend.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help=f"a config, for the gateway's address and admin key variable (default: ${DEFAULT_CONFIG_ENV})",
    )
    spend.add_argument("--url", help="a running gateway (default: the config's server, else http://127.0.0.1:8080)")
    spend.add_argument("--admin-key", help="the gateway's admin key (default: $GATEWAY_ADMIN_KEY)")
    spend.add_argument("--window", choices=["day", "week", "month"], default="month", help="the UTC calendar window")
    spend.add_argument("--by", help="sum over the rest of: key,team,model,provider,deployment (default: all)")
    spend_output = spend.add_mutually_exclusive_group()
    spend_output.add_argument("--json", action="store_true", help="print the JSON document instead of a table")
    spend_output.add_argument("--csv", action="store_true", help="print CSV rows (raw values) instead of a table")
    spend.set_defaults(func=cmd_spend)

    fake = _command(commands, "fake-provider", "run a fake OpenAI-compatible provider (for trying things out)")
    fake.add_argument("--name", default="fake", help="its name, as models.deployments[].provider refers to it")
    fake.add_argument("--host", default="127.0.0.1", help="listen on this address")
    fake.add_argument("--port", type=int, default=9001, help="listen on this port")
    fake.add_argument("--ttft", type=float, default=0.2, metavar="SECONDS", help="seconds to the first token")
    fake.add_argument("--tps", type=float, default=100.0, help="tokens per second (0: all at once)")
    fake.add_argument("--tokens", type=int, default=64, help="answer length in tokens")
    fake.add_argument("--status", type=int, default=200, help="answer this HTTP status instead (with --error-rate)")
    fake.add_argument(
        "--error-rate", type=float, default=1.0, metavar="SHARE", help="share of requests answered with --status"
    )
    fake.add_argument("--jitter", type=float, default=0.0, metavar="SIGMA", help="log-normal sigma on TTFT and speed")
    fake.add_argument("--seed", type=int, help="seeds the jitter and the errors (default: different every run)")
    fake.set_defaults(func=cmd_fake_provider)

    demo = _command(commands, "demo", "simulated providers and the gateway in front of them, in one process")
    demo.add_argument("--host", default="127.0.0.1", help="the gateway's address (the providers stay on loopback)")
    demo.add_argument("--port", type=int, default=8080, help="the gateway's port (0: any free port)")
    demo.add_argument(
        "--traffic", type=float, default=2.0, metavar="RATE", help="background requests per second (0: none)"
    )
    demo.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop by itself after this long (default: run until Ctrl-C)"
    )
    demo.add_argument(
        "--degrade-after", type=float, default=60.0, metavar="SECONDS", help="when 'fading' degrades (-1: never)"
    )
    demo.add_argument("--seed", type=int, default=7, help="seeds the providers' jitter and the traffic")
    demo.add_argument(
        "--write-config",
        metavar="FILE",
        help="write the gateway's config (the running providers' URLs) to FILE, for `gateway bench -c FILE` "
        "or `gateway check -c FILE` while the demo runs (default: none written)",
    )
    demo.set_defaults(func=cmd_demo)

    bench = _command(
        commands, "bench", "benchmark providers (directly or through a gateway) the way public leaderboards do"
    )
    bench.add_argument(
        "--api",
        choices=("chat", "responses", "messages"),
        default="chat",
        help="the API to benchmark: chat, responses (OpenAI) or messages (Anthropic)",
    )
    bench.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help=f"benchmark this config's deployments directly (default: ${DEFAULT_CONFIG_ENV})",
    )
    bench.add_argument(
        "--url", help="benchmark the models of the gateway at this base URL, e.g. http://host:8080/v1 (default: none)"
    )
    bench.add_argument("--model", action="append", help="only this model (repeatable; default: every model)")
    bench.add_argument("-n", "--requests", type=int, default=20, help="requests per target")
    bench.add_argument("--concurrency", type=int, default=1, help="requests in flight per target")
    bench.add_argument("--max-tokens", type=int, default=256, help="output ceiling per request")
    bench.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="seconds per request")
    bench.add_argument(
        "--prompts", metavar="FILE", help="JSONL, one chat request body per line (default: the built-in set)"
    )
    bench.add_argument(
        "--out", metavar="PREFIX", help="write PREFIX.json, PREFIX.csv and PREFIX.requests.csv (default: none)"
    )
    bench.add_argument(
        "--seed-stats", action="store_true", help="record the results into the config's stats store (default: off)"
    )
    bench.add_argument("--api-key-env", default="GATEWAY_API_KEY", help="env var with the client key for --url")
    bench.add_argument(
        "--tasks",
        nargs="?",
        const="",
        metavar="FILE",
        help="structured tasks with exact rubrics, each once per target: accuracy beside speed (FILE: JSONL tasks, "
        "docs/quality.md; default: the built-in ten)",
    )
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `gateway`: what it can do, not an error
        parser.print_help()
        return 0
    try:
        result: int = args.func(args)
        sys.stdout.flush()  # inside the try: a reader that left (`gateway stats | head`) is seen here
    except BrokenPipeError:
        # Python would print a traceback while flushing at exit; point stdout at /dev/null and stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result
