"""``gateway fake-provider``, ``gateway demo`` and ``gateway bench``: each turns its arguments into
its package's options and hands over (``gateway.fakes``, ``gateway.demo``, ``gateway.bench``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gateway.commands.common import config_path, fail


def cmd_fake_provider(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.fakes import FakeBehavior, FakeProvider
    from gateway.server import GatewayServer, run

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
    config = uvicorn.Config(
        app, host=args.host, port=args.port, loop="uvloop", http="httptools", access_log=False, log_level="warning"
    )
    return run(GatewayServer(config))  # the gateway's clean stop, however many signals


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
    return run_demo(options)  # a Ctrl-C before the demo took the signal over: ``gateway.cli.main``


def cmd_bench(args: argparse.Namespace) -> int:
    from gateway.bench import BenchOptions, BenchSettings, run_bench_command

    if args.requests < 1 or args.concurrency < 1 or args.max_tokens < 1 or args.timeout <= 0:
        return fail("bench: -n, --concurrency, --max-tokens and --timeout must be positive")
    options = BenchOptions(
        config_path=config_path(args),
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
