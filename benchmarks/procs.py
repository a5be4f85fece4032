"""The server processes a benchmark runs against, and what /proc says about them.

Why separate processes: the overhead of a proxy is only honest when the proxy, the fake
provider and the load generator each run as they would in production, with their own
interpreter and event loop, so that their CPU time can be read apart from /proc. Every process
started here is stopped by its own PID when its block ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Server:
    """A running server process: its PID, where it listens, and the file its output goes to."""

    name: str
    pid: int
    base_url: str
    """Everything up to and including ``/v1``."""
    log_path: Path

    @property
    def chat_url(self) -> str:
        return self.base_url + "/chat/completions"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass(frozen=True)
class MachineCpu:
    """The whole machine's CPU time so far, from /proc/stat, in seconds summed over all cores."""

    busy: float
    total: float
    softirq: float
    steal: float

    @classmethod
    def read(cls) -> MachineCpu:
        fields = [int(v) / CLOCK_TICKS for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        user, nice, system, idle, iowait, irq, softirq, steal = fields
        return cls(busy=sum(fields) - idle - iowait, total=sum(fields), softirq=softirq, steal=steal)

    def since(self, before: MachineCpu) -> MachineCpu:
        return MachineCpu(
            self.busy - before.busy, self.total - before.total, self.softirq - before.softirq, self.steal - before.steal
        )


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc/<pid>/statm (second field, in pages)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def wait_ready(url: str, child: subprocess.Popen[bytes], log_path: Path, timeout: float = 30.0) -> None:
    """Poll ``url`` until it answers below 500, failing early (with the log's tail) if the child died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"{child.args!r} exited with {child.returncode}:\n{tail(log_path)}")
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready within {timeout} s:\n{tail(log_path)}")


def tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


@contextlib.contextmanager
def started(
    name: str,
    args: list[str],
    port: int,
    ready_path: str,
    folder: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[Server]:
    """Run ``python <args>`` (stdout and stderr to a log file in ``folder``) until the block ends."""
    log_path = folder / f"{name}.log"
    with log_path.open("wb") as log:
        child = subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        try:
            wait_ready(f"http://127.0.0.1:{port}{ready_path}", child, log_path)
            yield Server(name, child.pid, f"http://127.0.0.1:{port}/v1", log_path)
        finally:
            stop(child)


def stop(child: subprocess.Popen[Any]) -> None:
    child.terminate()
    try:
        child.wait(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def fake_provider(folder: Path) -> contextlib.AbstractContextManager[Server]:
    """The fake provider, unpaced and answering 32 tokens by default (paced runs override per request)."""
    port = free_port()
    args = ["-m", "gateway", "fake-provider", "--port", str(port), "--name", "fake"]
    args += ["--ttft", "0", "--tps", "0", "--tokens", "32"]
    return started("fake", args, port, "/_fake/state", folder)


def passthrough(upstream: Server, folder: Path) -> contextlib.AbstractContextManager[Server]:
    port = free_port()
    args = ["-m", "benchmarks.passthrough", "--port", str(port), "--upstream", upstream.base_url]
    return started("passthrough", args, port, "/healthz", folder)


def gateway(
    config_text: str, name: str, folder: Path, source: Path | None = None
) -> contextlib.AbstractContextManager[Server]:
    """``python -m gateway serve`` with ``config_text``; its access log (stdout) goes to the log file.

    ``source``: a checkout of another version of the gateway (e.g. a ``git worktree`` at an older
    commit) to run instead of the installed one, for A/B comparisons between versions."""
    port = free_port()
    config = folder / f"{name}.toml"
    config.write_text(config_text)
    # No client keys: the benchmark measures the relay, not key checks, and a key set in the
    # caller's environment would make every request a 401.
    env = {k: v for k, v in os.environ.items() if k not in ("GATEWAY_API_KEYS", "GATEWAY_ADMIN_KEY")}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    args = ["-m", "gateway", "serve", "-c", str(config), "--port", str(port), "--log-level", "warning"]
    return started(name, args, port, "/healthz", folder, env, cwd=source)


def fake_open_streams(fake: Server) -> int:
    state = get_json(fake.base_url.removesuffix("/v1") + "/_fake/state")
    return int(state["open_streams"])


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    names = ("aiohttp", "starlette", "uvicorn", "uvloop", "httptools")
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in names)
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs ({model}), {platform.platform()}, "
        f"Python {platform.python_version()}; {versions}"
    )
