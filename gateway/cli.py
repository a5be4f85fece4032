"""The ``gateway`` command: the argument parser and the dispatch to each subcommand.

The subcommands themselves live in ``gateway/commands/`` (serve, check, stats and spend, the fake
provider, demo and bench). ``main`` is the console script's entry point and ``python -m gateway``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.cli_help import DESCRIPTION, QUICK_START, HelpFormatter, epilog
from gateway.commands.check import auth_summary, cmd_check, cold_rankings, counted, routing_table
from gateway.commands.common import DEFAULT_CONFIG_ENV, non_negative, port_arg
from gateway.commands.reports import cmd_spend, cmd_stats
from gateway.commands.serve import cmd_serve, workers_arg
from gateway.commands.tools import cmd_bench, cmd_demo, cmd_fake_provider

__all__ = [
    "DEFAULT_CONFIG_ENV",
    "auth_summary",
    "build_parser",
    "cmd_bench",
    "cmd_check",
    "cmd_demo",
    "cmd_fake_provider",
    "cmd_serve",
    "cmd_spend",
    "cmd_stats",
    "cold_rankings",
    "counted",
    "main",
    "routing_table",
]


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
    serve.add_argument("--port", type=port_arg, help="listen on this port (default: the config's server.port)")
    serve.add_argument(
        "--workers",
        type=workers_arg,
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
    fake.add_argument("--port", type=port_arg, default=9001, help="listen on this port")
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
    demo.add_argument("--port", type=port_arg, default=8080, help="the gateway's port (0: any free port)")
    demo.add_argument(
        "--traffic", type=non_negative, default=2.0, metavar="RATE", help="background requests per second (0: none)"
    )
    demo.add_argument(
        "--duration",
        type=non_negative,
        metavar="SECONDS",
        help="stop by itself after this long (default: run until Ctrl-C)",
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
    except KeyboardInterrupt:
        # Ctrl-C before a server took the signal over (while it starts), or during a one-off command: a stop
        # the user asked for, so one line and the conventional status, not a traceback.
        print("gateway: interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        # Python would print a traceback while flushing at exit; point stdout at /dev/null and stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result
