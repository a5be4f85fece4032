"""The real agent CLIs (Claude Code, Codex), found and run non-interactively against a gateway on loopback.

Why: agents are most of a gateway's traffic, and they exercise it as no SDK call does (tools, long
prompts, betas, retries). The binaries come from npm: ``tests/install-deps`` (run by ``make test``)
installs them in ``.cache/agent-clis``; ``GATEWAY_AGENT_CLIS`` may name another ``node_modules/.bin``
that holds them, and a developer machine may have them in ``/tmp/npmcli``. Missing binaries fail the test with the
command that installs them: never a silent skip.

Each run is sealed to loopback: a fresh ``HOME`` (and ``CODEX_HOME``), no telemetry, no updater, and
every proxy variable pointing at a trap on loopback (``ProxyTrap``) with only ``127.0.0.1``/``localhost``
exempt. Both CLIs send all their HTTP through those proxies (checked by hand: with no exemption they never
reach the gateway), so a request to anywhere but loopback reaches the trap, which counts it and closes
it: the request fails instead of leaving the machine, and the run says how many tried (``CliRun.escapes``,
which the tests assert is 0).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

CLIS_ENV = "GATEWAY_AGENT_CLIS"
SEARCHED = (
    Path(__file__).resolve().parents[2] / ".cache/agent-clis/node_modules/.bin",
    Path("/tmp/npmcli/node_modules/.bin"),
)
INSTALL = (
    "npm install --prefix .cache/agent-clis @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 "
    f"(or set {CLIS_ENV} to the node_modules/.bin that holds claude and codex)"
)
PROMPT = "Run the command, then tell me what it printed."
TIMEOUT_S = 120.0


def find_cli(name: str) -> Path:
    """The CLI's binary, or a test failure saying how to install it."""
    configured = os.environ.get(CLIS_ENV)
    places = [Path(configured)] if configured else list(SEARCHED)
    for place in places:
        binary = place / name
        if binary.exists():
            return binary
    pytest.fail(f"the {name} CLI is not installed (looked in {', '.join(map(str, places))}): {INSTALL}")


@dataclass(frozen=True, slots=True)
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    escapes: tuple[str, ...] = ()
    """What the CLI asked its proxy for (each an attempt to reach beyond loopback): the first line of each."""


class ProxyTrap:
    """A loopback listener standing in for every proxy: it counts each connection and closes it unanswered."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.connections = 0
        self.requests: list[str] = []
        """Each connection's first line (``CONNECT host:port HTTP/1.1``): where the CLI tried to go."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.settimeout(1.0)
            try:
                self.requests.append(connection.recv(512).split(b"\r\n", 1)[0].decode("latin-1"))
            except OSError:
                self.requests.append("")
            connection.close()

    @contextmanager
    def running(self) -> Iterator[ProxyTrap]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self._socket.close()


def sealed_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment that lets the CLI reach loopback only (see the module docstring); ``run`` sets the proxy."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    env.update(extra)
    return env


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


def run(command: list[str], env: dict[str, str], cwd: Path) -> CliRun:
    """``command`` with every proxy variable pointing at a fresh ``ProxyTrap``; the run counts what reached it."""
    started = time.monotonic()
    with ProxyTrap().running() as trap:
        trapped = {**env, **dict.fromkeys(PROXY_VARIABLES, trap.url)}
        done = subprocess.run(
            command, env=trapped, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    return CliRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started, tuple(trap.requests))


def run_claude(
    base_url: str, api_key: str, tmp: Path, model: str = "m", options: tuple[str, ...] = (), **environ: str
) -> CliRun:
    """``claude -p`` with the Bash tool allowed, JSON output; the gateway as Anthropic's base URL, ``options`` added
    to its command line and ``environ`` to its environment. A second run in the same ``tmp`` shares the first's home,
    where Claude Code keeps its sessions (what ``--continue`` resumes)."""
    home = tmp / "claude-home"
    home.mkdir(exist_ok=True)
    env = sealed_env(
        home,
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=api_key,
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        **environ,
    )
    command = [str(find_cli("claude")), "-p", PROMPT, "--model", model, "--output-format", "json", *options]
    return run([*command, "--allowedTools", "Bash"], env, tmp)


SEALED = "[analytics]\nenabled = false\n[features]\nplugins = false\n"
"""Codex exports usage metrics to OpenAI (``ab.chatgpt.com``) and syncs OpenAI's curated plugin marketplace from
github.com when it starts: both off, as Claude Code's telemetry and updater are."""


def run_codex(
    base_url: str, api_key: str, tmp: Path, model: str = "m", options: tuple[str, ...] = ()
) -> tuple[CliRun, str]:
    """``codex exec`` with the gateway as a custom Responses provider, in Codex's default configuration otherwise
    (its web search and sub-agent tools on), ``options`` added to its command line (``("-s", "workspace-write")``
    to let it write files); returns the run and its last message."""
    codex_home = tmp / "codex-home"
    codex_home.mkdir()
    config = (
        f"model = {json.dumps(model)}\n"
        + 'model_provider = "gateway"\n'
        + "[model_providers.gateway]\n"
        + 'name = "gateway"\n'
        + f"base_url = {json.dumps(base_url)}\n"
        + 'env_key = "GATEWAY_KEY"\n'
        + 'wire_api = "responses"\n'
        + SEALED
    )
    (codex_home / "config.toml").write_text(config)
    last = tmp / "codex-last.txt"
    env = sealed_env(tmp, CODEX_HOME=str(codex_home), GATEWAY_KEY=api_key)
    command = [
        str(find_cli("codex")),
        "exec",
        "--skip-git-repo-check",
        "--ephemeral",
        *options,
        "-o",
        str(last),
        PROMPT,
    ]
    result = run(command, env, tmp)
    return result, last.read_text() if last.exists() else ""
