"""The command blocks of the README and ``docs/`` run as printed, against one ``gateway demo``.

Convention: a ```` ```bash ```` block whose fence is directly preceded by the line ``<!-- runs -->``
runs offline against the demo (simulated providers, no key, nothing fetched). Blocks that need a
network, Docker, a cluster or a provider key carry no mark and are only parsed (``test_cli.py`` checks
that every ``gateway`` command in them exists). One demo serves every block: its port replaces
``127.0.0.1:8080``, the folder holds ``config.example.toml``, ``keys.example.toml`` and the demo's
own ``demo.toml``, ``gateway`` is this interpreter's, and ``GATEWAY_API_KEY`` is set (the demo takes
any key). A block passes when it exits 0 and prints no error object.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.config import parse_config
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- runs -->"
ERROR = re.compile(r'"error":\s*\{|"type":\s*"error"')
"""An error object in either API's shape (a Responses body's ``"error": null`` is no error)."""
BLOCK = re.compile(r"^```(?:bash|sh)\n(.*?)^```", re.DOTALL | re.MULTILINE)
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md")


def runnable_blocks() -> list[tuple[str, str]]:
    """(where, text) of every marked block: ``README.md:13`` and the block's commands."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            before = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if before.strip() == MARK:
                line = text[: block.start()].count("\n") + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", block.group(1)))
    return found


BLOCKS = runnable_blocks()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("docs")
    for name in ("config.example.toml", "keys.example.toml"):
        shutil.copy(ROOT / name, folder / name)
    port = _free_port()
    bin_dir = folder / "bin"  # `gateway` on the PATH: this interpreter's package, as the venv's script would be
    bin_dir.mkdir()
    script = bin_dir / "gateway"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gateway "$@"\n')
    script.chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        "GATEWAY_API_KEY": "demo",
    }
    command = ["gateway", "demo", "--port", str(port), "--traffic", "1", "--duration", "300"]
    process = subprocess.Popen(
        [*command, "--write-config", "demo.toml"],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _ready(port), timeout=30, what="the demo to serve")
        yield port, folder, env
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_docs_mark_their_runnable_blocks() -> None:
    # Not a vacuous pass: the first screen's curl, the stats and bench commands, the API pages' examples.
    assert len(BLOCKS) >= 6, [where for where, _ in BLOCKS]


@pytest.mark.parametrize(("where", "commands"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_a_marked_block_runs_against_the_demo(
    demo: tuple[int, Path, dict[str, str]], where: str, commands: str
) -> None:
    port, folder, env = demo
    script = commands.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, f"{where}:\n{script}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert not ERROR.search(result.stdout), f"{where}: {result.stdout[-2000:]}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_every_link_resolves(path: Path) -> None:
    # The README's contents list and every page's links: each file exists, each #anchor is a heading of it.
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{path.name}: {target}"
        if anchor and linked.suffix == ".md":
            anchors = {_anchor(h) for h in HEADING.findall(linked.read_text(encoding="utf-8"))}
            assert anchor in anchors, f"{path.name}: {target} (headings: {sorted(anchors)})"


def test_every_docs_page_is_in_the_contents() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    contents = readme[readme.index("## Contents") :]
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in contents, f"docs/{page.name} is not in the README's contents"


def test_the_readmes_config_is_a_valid_config() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```toml\n(.*?)^```", readme, re.DOTALL | re.MULTILINE)
    assert blocks
    for block in blocks:
        config = parse_config(tomllib.loads(block), source="README.md")
        assert config.models and config.providers
