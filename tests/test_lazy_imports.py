"""What a gateway does not use it does not load: with its stats in memory, no redis-py (~8 MiB resident, 0.1 s of
start-up); with no canary, no aiohttp (~9 MiB, 0.2 s: the upstream client is the gateway's own). Built, started
and stopped in a fresh interpreter, neither is loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import asyncio, sys
from pathlib import Path
from gateway.app import AppOptions, create_app
from gateway.config import load_config
import gateway.cli, gateway.server

text = Path("benchmarks/gateway.bench.toml").read_text().replace("{fake_base_url}", "http://127.0.0.1:9/v1")
path = Path(sys.argv[1])
path.write_text(text)
app = create_app(load_config(str(path)), AppOptions())

async def lifespan():
    async with app.router.lifespan_context(app):
        pass

asyncio.run(lifespan())
print(sorted(m for m in sys.modules if m.split(".")[0] in ("redis", "aiohttp")))
"""


def test_a_gateway_without_redis_or_a_canary_imports_neither_client(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "gateway.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
