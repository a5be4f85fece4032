"""``gateway stats`` and ``gateway spend``: reports read from a running gateway (or, for stats, from Redis)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from gateway.commands.address import gateway_address
from gateway.commands.common import config_path, fail
from gateway.config import ConfigError, RedisMode, StatsConfig, load_config

if TYPE_CHECKING:
    import httpx


def gateway_document(response: httpx.Response, kind: str) -> dict[str, Any] | None:
    """The JSON object a gateway answered with, if it is one of ``kind`` (its ``object`` field), else None.

    Why: ``--url`` may name a proxy's login page, another service on the port or a half-started server; a 200
    that is not the gateway's document must read as one line saying so, not as a traceback."""
    try:
        document = response.json()
    except ValueError:  # not JSON (json's and httpx's decode errors are both ValueErrors)
        return None
    if not isinstance(document, dict) or document.get("object") != kind or not isinstance(document.get("data"), list):
        return None
    if not all(isinstance(row, dict) for row in document["data"]):
        return None
    return document


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

    path = config_path(args)
    if args.redis is not None:
        try:  # straight from Redis: the config's [stats] and models are what the report needs
            config = load_config(path) if path else None
        except ConfigError as exc:
            return fail(str(exc))
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
            return fail(f"--window ({stats.window_s}) must be a multiple of --slice ({stats.slice_s})")
        try:
            snapshot = asyncio.run(read_shared_snapshot(stats))
        except ConfigError as exc:
            return fail(str(exc))
        except REDIS_ERRORS as exc:
            return fail(f"cannot read stats from {stats.redis_target}: {exc}")
        rows = leaderboard(snapshot, config.models if config else ())
        document = leaderboard_json(
            rows, window_s=stats.window_s, taken_at=snapshot.taken_at, backend="redis", health=StoreHealth()
        )
    else:
        try:
            base = args.url or gateway_address(path).url
        except ConfigError as exc:
            return fail(str(exc))
        api_key = args.api_key or os.environ.get("GATEWAY_API_KEY")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            response = httpx.get(base.rstrip("/") + "/v1/gateway/stats", headers=headers, timeout=10.0)
        except httpx.HTTPError as exc:
            return fail(f"cannot reach the gateway at {base}: {exc}")
        if response.status_code != 200:
            return fail(f"{base} answered {response.status_code}: {response.text[:300]}")
        answered = gateway_document(response, "gateway.stats")
        if answered is None:
            return fail(f"{base} answered with something other than a gateway's stats: is it the gateway's address?")
        document = answered
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

    from gateway.admission.spending.report import render_csv, render_table

    try:
        address = gateway_address(config_path(args))
    except ConfigError as exc:
        return fail(str(exc))
    base = args.url or address.url
    variable = address.admin_key_env
    admin_key = args.admin_key or os.environ.get(variable)
    if not admin_key:
        return fail(f"spend needs the gateway's admin key: pass --admin-key or set ${variable}")
    params = {"window": args.window, **({"by": args.by} if args.by else {})}
    try:
        response = httpx.get(
            base.rstrip("/") + "/v1/gateway/spend",
            params=params,
            headers={"authorization": f"Bearer {admin_key}"},
            timeout=10.0,
        )
    except httpx.HTTPError as exc:
        return fail(f"cannot reach the gateway at {base}: {exc}")
    if response.status_code != 200:
        return fail(f"{base} answered {response.status_code}: {response.text[:300]}")
    document = gateway_document(response, "spend")
    if document is None:
        return fail(f"{base} answered with something other than a gateway's spend: is it the gateway's address?")
    if args.json:
        print(json.dumps(document, indent=2))
    elif args.csv:
        print(render_csv(document), end="")
    else:
        print(render_table(document))
    return 0
