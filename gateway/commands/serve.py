"""``gateway serve``: load and check the config, then run the gateway (one process, or N workers).

This and ``gateway demo`` are the entry points that build the app (``tests/test_architecture.py``).
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Literal

from gateway.commands.common import config_path, fail
from gateway.config import ConfigError, load_config
from gateway.tokens import TokenizerError, load_token_counter


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.accesslog import configure_access_log
    from gateway.admission.auth import exposure_notice, load_keys
    from gateway.app import AppOptions, create_app
    from gateway.metrics.series import WORKER_ENV
    from gateway.server import GatewayServer, run, uvicorn_config
    from gateway.supervisor import MULTIPROC_ENV, WorkerSpec, resolve_workers, serve_workers

    path = config_path(args)
    if path is None:
        return fail("no config given: use -c FILE (or set GATEWAY_CONFIG), or try `gateway demo`")
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
        return fail(str(exc))
    port = args.port if args.port is not None else config.server.port
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    configure_access_log()
    logging.getLogger("gateway.auth").log(level, notice)
    if workers > 1:
        try:
            return serve_workers(WorkerSpec(path, host, port, args.log_level, workers), config, os.environ)
        except OSError as exc:
            return fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    return run(GatewayServer(uvicorn_config(app, config, host, port, args.log_level)))


def workers_arg(value: str) -> int | Literal["auto"]:
    """``--workers``: a count of at least 1, or ``auto``."""
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f'expected a number of workers >= 1 or "auto", got "{value}"')
    return int(value)
