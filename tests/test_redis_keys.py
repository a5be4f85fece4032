"""Every key the gateway writes to Redis, and every operation it sends, checked against a real Redis
Cluster: each key belongs to a known family, and each multi-key operation stays inside one hash slot.

How: ``MONITOR`` on every master records what a gateway (stats, rate limits with a token correction)
and a stats store forced into a late write (the epoch) send under a prefix of their own. Each command's
keys are found from its name (a script's from its ``numkeys``); the slot of each key is asked of the
server (``CLUSTER KEYSLOT``). A command or a key family this test does not know fails it: whoever adds
one (session bindings, response ids, ...) must add it to ``FAMILIES`` or ``KEYLESS`` with its rule.
"""

from __future__ import annotations

import codecs
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.config import StatsConfig, parse_config
from gateway.redis_client import RedisConnections
from gateway.stats import RedisStatsStore
from tests.redis_topologies import ClusterNode, LoopbackCluster
from tests.support.clock import FakeClock
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.samples import make_sample
from tests.support.wait import wait_until

PREFIX = "keyfamilies"
KEY = "sk-gw-keys-test-0123456789"

FAMILIES: dict[str, re.Pattern[str]] = {
    # Stats (gateway/stats/redis_layout.py): one hash tag per (model, deployment).
    "stats slice": re.compile(r"^\{" + PREFIX + r":[^:{}]+:[^:{}]+\}:\d+$"),
    "stats writers": re.compile(r"^\{" + PREFIX + r":[^:{}]+:[^:{}]+\}:writers$"),
    "stats answers": re.compile(r"^\{" + PREFIX + r":[^:{}]+:[^:{}]+\}:answers$"),
    # The dashboard's history (gateway/stats/history.py): one hash per (model, deployment) and minute.
    "stats history minute": re.compile(r"^\{" + PREFIX + r":[^:{}]+:[^:{}]+\}:m:\d+$"),
    "stats pair index": re.compile(r"^" + PREFIX + r":pairs$"),
    "stats epoch": re.compile(r"^" + PREFIX + r":epoch$"),
    # Rate limits (gateway/admission/ratelimit.py): one hash tag per client key.
    "rate-limit minute": re.compile(r"^" + PREFIX + r":ratelimit:\{k[0-9a-f]{16}\}:\d+$"),
    # Budgets and spend (gateway/admission/spending/redis_store.py): one hash tag per team, or per key without one.
    "budget": re.compile(r"^" + PREFIX + r":budget:\{[tk]:[^{}]+\}:(key|team):[^:{}]+:[^:{}]+(:holds)?$"),
    "spend breakdown": re.compile(r"^" + PREFIX + r":spend:\{[tk]:[^{}]+\}:(day|week|month):[^:{}]+$"),
    # Bindings (gateway/sessions/bindings.py): each key is its own hash tag (single-key commands only).
    "response binding": re.compile(r"^\{" + PREFIX + r":bind:response:[^{}]+\}$"),
    # Session bindings (gateway/sessions/session_bindings.py): a session key is a 32-hex digest (per key and model).
    "session binding": re.compile(r"^\{" + PREFIX + r":bind:session:[0-9a-f]{32}\}$"),
    # Responses conversations the gateway keeps (gateway/conversations.py): each its own hash tag.
    "conversation": re.compile(r"^\{" + PREFIX + r":conv:[^{}]+\}$"),
}
"""Every key family, by the pattern of its names."""

TOGETHER = {
    "stats slice": "pair",
    "stats writers": "pair",
    "stats answers": "pair",
    "stats history minute": "pair",
    "rate-limit minute": "client",
    "budget": "spender",
    "spend breakdown": "spender",
}
"""Families whose keys are used together, and the tag they share: one slot per (model, deployment), per
client, per spender (a team, or a key of no team)."""

SINGLE_KEY = {
    "get", "set", "hincrby", "hget", "hset", "hmget", "hgetall", "expire", "pttl", "del",
    "zadd", "zrangebyscore", "zremrangebyscore", "lrange",
}  # fmt: skip
KEYLESS = {
    "client", "cluster", "command", "script", "role", "wait", "ping", "hello", "info", "readonly", "asking", "auth",
}  # fmt: skip
SCRIPTS = {"eval", "evalsha"}

_TOKEN = re.compile(r'"((?:\\.|[^"\\])*)"')


def parse_monitor_line(line: str) -> tuple[str, list[str]]:
    """``1700000000.123 [0 127.0.0.1:5555] "cmd" "arg" ...`` → (source, [cmd, arg, ...])."""
    head, _, rest = line.partition("] ")
    source = head.rpartition(" ")[2]
    args = [codecs.escape_decode(t.encode())[0].decode("utf-8", "replace") for t in _TOKEN.findall(rest)]
    return source, args


class Monitor:
    """``MONITOR`` on one node, read in a thread from a raw socket until stopped (a client library's
    reader gives up its connection at the first read timeout)."""

    def __init__(self, node: ClusterNode) -> None:
        self.sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
        self.lines: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        pending = b""
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return
            pending += data
            *lines, pending = pending.split(b"\r\n")
            self.lines += [line[1:].decode("utf-8", "replace") for line in lines if line.startswith(b"+")]

    def __enter__(self) -> Monitor:
        self.sock.sendall(b"MONITOR\r\n")
        assert self.sock.recv(5) == b"+OK\r\n", "MONITOR did not start"
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.stop.is_set():
            self.stop.set()
            self.thread.join(5)
            self.sock.close()


@pytest.fixture
def monitors(redis_cluster: LoopbackCluster) -> Iterator[list[Monitor]]:
    masters = [node for node in redis_cluster.live() if node.role() == "master"]
    opened = [Monitor(node).__enter__() for node in masters]
    yield opened
    for monitor in opened:
        monitor.__exit__()


def drive_gateway(fakes: Fakes, start_gateway: Callable[..., Gateway], cluster: LoopbackCluster, tmp: Path) -> None:
    keys = tmp / "keys.toml"
    keys.write_text(
        f'[[keys]]\nname = "k"\nkey = "{KEY}"\nrequests_per_minute = 100000\ntokens_per_minute = 10000000\n'
        'budget_usd = 100.0\nbudget_window = "day"\n'
    )
    fake = fakes.start("p")
    config = parse_config(
        {
            "stats": {
                "backend": "redis",
                "redis_mode": "cluster",
                "redis_url": cluster.url,
                "key_prefix": PREFIX,
                "flush_interval_s": 0.05,
                "refresh_interval_s": 0.1,
                "redis_wait_replicas": 1,
                # MONITOR on every node slows each command; this test reads key slots, not how long a request waits.
                "redis_request_timeout_s": 5.0,
            },
            "auth": {"api_keys_file": str(keys)},
            "providers": [{"name": "p", "base_url": fake.base_url, "apis": ["chat", "responses"]}],
            "models": [{"name": name, "deployments": [{"provider": "p", "model": "up"}]} for name in ("m1", "m2")],
        },
        source="keys.toml",
    )
    gateway = start_gateway(config)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)
    for i in range(6):
        model = ("m1", "m2")[i % 2]
        stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    response = client.responses.create(model="m1", input="hi")  # binds its id to its deployment
    assert client.responses.create(model="m1", input="next", previous_response_id=response.id).output_text
    for question in ("hi", "and then?"):  # a session: bound after each answer, looked up before the next
        session = {"x-session-id": "conversation-1"}
        messages: list[Any] = [{"role": "user", "content": question}]
        assert client.chat.completions.create(model="m1", messages=messages, extra_headers=session).choices

    def flushed() -> bool:
        store = httpx.get(gateway.url + "/v1/gateway/stats", headers={"authorization": f"Bearer {KEY}"}).json()
        return bool(store["store"]["buffered_samples"] == 0 and sum(r["samples"] for r in store["data"]) == 10)

    wait_until(flushed, timeout=15, what="the gateway's samples to be written")


async def late_write(cluster: LoopbackCluster) -> None:
    """A sample written long after its slice ended (held through an outage) replaces the epoch."""
    clock = FakeClock(time.time() - 60)
    config = StatsConfig(
        backend="redis", redis_mode="cluster", redis_url=cluster.url, key_prefix=PREFIX, refresh_interval_s=3600
    )
    redis_connections = RedisConnections(config, {})
    store = RedisStatsStore(config, clock, redis_connections)
    await store.start()
    store.record(make_sample("m1", "p"))
    clock.advance(55)
    await store.flush()
    await store.aclose()
    await redis_connections.aclose()


def test_every_key_family_and_multi_key_operation_is_slot_safe(
    redis_cluster: LoopbackCluster,
    monitors: list[Monitor],
    fakes: Fakes,
    start_gateway: Callable[..., Gateway],
    tmp_path: Path,
) -> None:
    import asyncio

    drive_gateway(fakes, start_gateway, redis_cluster, tmp_path)
    asyncio.run(late_write(redis_cluster))
    for monitor in monitors:
        monitor.__exit__()

    operations: list[tuple[str, list[str]]] = []
    for monitor in monitors:
        for line in monitor.lines:
            source, args = parse_monitor_line(line)
            if not args or source == "lua" or not any(PREFIX in arg for arg in args):
                continue  # not ours, or run inside a script (checked as part of the script)
            name = args[0].lower()
            if name in SCRIPTS:
                numkeys = int(args[2])
                operations.append((name, args[3 : 3 + numkeys]))
            elif name in SINGLE_KEY:
                operations.append((name, [args[1]]))
            else:
                assert name in KEYLESS, f"unknown command {name.upper()} {args[1:3]}: add it here with its key rule"

    assert operations, "MONITOR saw none of the gateway's commands"
    slot_of: dict[str, int] = {}

    def slot(key: str) -> int:
        if key not in slot_of:
            slot_of[key] = redis_cluster.keyslot(key)
        return slot_of[key]

    seen: dict[str, set[str]] = {}
    for name, keys in operations:
        for key in keys:
            family = next((f for f, pattern in FAMILIES.items() if pattern.match(key)), None)
            assert family is not None, f"{name.upper()} writes {key!r}, of no known key family: add it to FAMILIES"
            seen.setdefault(family, set()).add(key)
        # The rule itself: one operation, one slot.
        assert len({slot(key) for key in keys}) == 1, f"{name.upper()} spans slots: {[(k, slot(k)) for k in keys]}"

    assert set(seen) == set(FAMILIES), f"families never exercised: {set(FAMILIES) - set(seen)}"
    # Keys used together share their tag's slot: every slice and the writers hash of one pair, every
    # minute of one client key.
    groups: dict[tuple[str, str], set[int]] = {}
    for family, family_keys in seen.items():
        if family in TOGETHER:
            for key in family_keys:
                tag = key[key.index("{") + 1 : key.index("}")]
                groups.setdefault((TOGETHER[family], tag), set()).add(slot(key))
    assert groups and all(len(slots) == 1 for slots in groups.values()), groups
    scripts = [keys for name, keys in operations if name in SCRIPTS]
    assert any(len(keys) >= 2 for keys in scripts), "no multi-key script was seen"
