"""redis-py parses the gateway's Redis replies with hiredis, the C parser the project depends on (``redis[hiredis]``
in pyproject), and the gateway reads the same with redis-py's own Python parser where hiredis is absent: the
stats window and minutes, the spend balances and breakdown, written and read back through the real stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-parser")).start()
    yield server
    server.stop()


def _round_trip(server: RedisServer, prefix: str, *flags: str) -> dict[str, Any]:
    """``tests.support.redis_round_trip`` in a process of its own (hiredis is picked when redis-py is imported)."""
    command = [sys.executable, "-m", "tests.support.redis_round_trip", server.url, prefix, *flags]
    done = subprocess.run(command, cwd=ROOT, env=os.environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_replies_are_parsed_by_hiredis_and_read_the_same_without_it(server: RedisServer) -> None:
    with_hiredis = _round_trip(server, "with")
    without = _round_trip(server, "without", "--no-hiredis")
    parsers = {part: (with_hiredis[part].pop("parser"), without[part].pop("parser")) for part in ("stats", "spend")}
    # hiredis is a dependency (pyproject: redis[hiredis]); an environment made before it was: `make install`.
    assert parsers["stats"][0] == parsers["spend"][0] == "_AsyncHiredisParser", parsers
    assert "Hiredis" not in parsers["stats"][1] and "Hiredis" not in parsers["spend"][1], parsers
    assert with_hiredis == without
    summaries = with_hiredis["stats"]["summaries"]
    assert {d: s["outcomes"] for d, s in summaries.items()} == {
        "d": {"ok": 88, "upstream_error": 12},
        "e": {"ok": 89, "upstream_error": 11},
    }
    assert with_hiredis["spend"]["refused"] > 0 and with_hiredis["spend"]["rows"], with_hiredis["spend"]
