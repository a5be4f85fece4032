"""``gateway check``: validate a config in full and print what it routes where, and to whom it is open.

Nothing here starts a server: the routing table, the key summary and the cold ranking are what a
freshly started gateway would see.
"""

from __future__ import annotations

import argparse
import os

from gateway.commands.common import config_path, fail
from gateway.config import ConfigError, GatewayConfig, load_config, resolve_secrets
from gateway.tables import format_table
from gateway.tokens import TokenizerError, load_token_counter


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
    from gateway.routing.serving import build_router
    from gateway.stats import InMemoryStatsStore

    router = build_router(config, InMemoryStatsStore(config.stats))
    tables = [ranking_table(router.rank(model)) for model in config.models]
    return "Current ranking (no measurements yet: live ones at GET /v1/gateway/routes)\n\n" + "\n\n".join(tables)


def counted(count: int, noun: str) -> str:
    """``1 provider``, ``2 providers``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cmd_check(args: argparse.Namespace) -> int:
    """Validate in full (config, keys, tokenizer), print what was found, and say "valid" only if all of it passed."""
    path = config_path(args)
    if path is None:
        return fail("no config given: use -c FILE")
    try:
        config = load_config(path)
    except ConfigError as exc:
        return fail(str(exc))
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
        return fail(str(exc))
    print()
    print(summary)
    print()
    print(cold_rankings(config))
    print()
    print(f"{path}: valid (config, provider keys, client and admin keys, tokenizer {config.stats.tokenizer})")
    return 0


def auth_summary(config: GatewayConfig, environ: dict[str, str]) -> str:
    """Who may call the gateway, as counts and variable names: never a key. Raises ``ConfigError``."""
    from gateway.admission.auth import load_keys

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
