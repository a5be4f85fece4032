"""``gateway demo`` as a user runs it: a subprocess, driven with the OpenAI SDK, stopped by a signal."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from gateway.config import load_config
from gateway.demo import DEMO_MODELS, GATEWAY_PAGES, demo_config, demo_config_data, write_demo_config
from gateway.fakes.profiles import DEMO_PROFILES
from gateway.policies import BUILTIN_POLICIES
from gateway.routing.choose import COLD_RACE, RACE_BUDGET

BASE_URL = re.compile(r"OpenAI base_url\s+(http://\S+/v1)")
PROVIDER_LINE = re.compile(r"^\s+(\w+)\s.*\s(http://127\.0\.0\.1:(\d+)/v1)$")
EXPLORED = re.compile(
    r"explored (\d+) of (\d+) requests so far \(\S+; (\d+) paid by a budget of (\d+)% of streamed requests"
    r"(?: and (\d+) to start)?, (\d+) drawn away from the leader; ([\d.]+) extra attempts per request\), "
    r"besides (\d+) cold-start race"
)
READY = "Ctrl-C stops everything."


class DemoProcess:
    """``gateway demo`` in a subprocess; its output is collected by a thread so that reads never block."""

    def __init__(
        self,
        *args: str,
        command: list[str] | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        program = command or [sys.executable, "-m", "gateway"]
        self.proc = subprocess.Popen(
            [*program, "demo", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._collect, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._collect, args=(self.proc.stderr, self.errors), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _collect(stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None:
                raise AssertionError(f"demo exited ({self.proc.returncode}): {self.lines} {self.errors}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in the demo's output within {timeout}s: {self.lines}")
            time.sleep(0.02)

    @property
    def base_url(self) -> str:
        for line in self.lines:
            match = BASE_URL.search(line)
            if match:
                return match.group(1)
        raise AssertionError(f"no base URL printed: {self.lines}")

    @property
    def provider_urls(self) -> dict[str, str]:
        return {m.group(1): m.group(2) for m in map(PROVIDER_LINE.match, self.lines) if m}

    def ports(self) -> list[int]:
        urls = [self.base_url, *self.provider_urls.values()]
        return [int(url.split(":")[2].split("/")[0]) for url in urls]

    def stop(self, sig: int = signal.SIGINT, timeout: float = 15.0) -> int:
        self.proc.send_signal(sig)
        return self.finish(timeout)

    def finish(self, timeout: float) -> int:
        """Wait for the process to exit by itself, then for its output to be read to the end."""
        code = self.proc.wait(timeout)
        for thread in self._threads:
            thread.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish(10)


@pytest.fixture
def demo_process() -> Iterator[list[DemoProcess]]:
    started: list[DemoProcess] = []
    yield started
    for process in started:
        process.kill()


def _refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as response:
        data: dict[str, object] = json.load(response)
        return data


def test_demo_serves_the_openai_sdk_and_stops_cleanly_on_sigint(demo_process: list[DemoProcess]) -> None:
    demo = DemoProcess("--traffic", "0", "--duration", "120")
    demo_process.append(demo)
    demo.wait_for(READY)
    assert set(demo.provider_urls) == {p.name for p in DEMO_PROFILES}
    client = openai.OpenAI(base_url=demo.base_url, api_key="anything", max_retries=0, timeout=30)

    assert {m.id for m in client.models.list()} == {name for name, _, _ in DEMO_MODELS}
    base = demo.base_url.removesuffix("/v1")
    for _, path in GATEWAY_PAGES:
        # A page is announced as missing exactly when this build does not serve it (they land separately).
        line = next(line for line in demo.lines if f"{base}{path}" in line)
        assert ("not in this build yet" in line) == (_status(base + path) == 404), line
    raw = client.chat.completions.with_raw_response.create(
        model="glm-5.3-flash", messages=[{"role": "user", "content": "Say hi"}], max_tokens=8
    )
    completion = raw.parse()
    assert raw.headers["x-gateway-provider"] in demo.provider_urls
    assert completion.choices[0].message.content
    assert len(completion.choices[0].message.content.split()) == 8

    stream = client.chat.completions.create(
        model="llama-3.3-70b", messages=[{"role": "user", "content": "Count"}], max_tokens=12, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert len(text.split()) == 12

    ports = demo.ports()
    assert demo.stop(signal.SIGINT) == 0
    assert all(_refuses(port) for port in ports), "a port of the demo still accepts connections"
    assert any("stopped" in line for line in demo.lines)
    assert not [line for line in demo.errors if "Traceback" in line], demo.errors


def test_demo_traffic_fills_the_providers_and_sigterm_stops_streams_in_flight(
    demo_process: list[DemoProcess],
) -> None:
    demo = DemoProcess("--traffic", "30", "--degrade-after", "0.5", "--duration", "120")
    demo_process.append(demo)
    demo.wait_for(READY)
    demo.wait_for("fading degrades now")
    # The story says where long answers should go, from the fakes' own figures: fading while healthy; after, a
    # near-tie that includes the cheap slow nimble (so long answers going back to it is no misroute).
    demo.wait_for("now a long glm-5.3-flash answer")
    (healthy,) = [line for line in demo.lines if "] a long glm-5.3-flash answer" in line]
    (degraded,) = [line for line in demo.lines if "now a long glm-5.3-flash answer" in line]
    assert healthy.endswith("the router should send long answers to fading"), healthy
    assert "nimble score within" in degraded and "may go to any of them" in degraded, degraded
    urls = demo.provider_urls

    def served() -> int:
        total = 0
        for url in urls.values():
            state = _get_json(url.removesuffix("/v1") + "/_fake/state")
            total += int(str(state["requests"]))
        return total

    deadline = time.monotonic() + 30
    while served() < 20:
        assert time.monotonic() < deadline, "background traffic did not reach the providers"
        time.sleep(0.1)

    # The status line's exploration is the router's own count: the cold start's races (which answer the first
    # requests as "explore" routes) are counted apart from it, and what its budget paid for stays within the bound
    # the line reports: a share of the requests it names (the demo's traffic streams every one) and what the budget
    # holds to start.
    demo.wait_for("explored ")
    status = next(line for line in demo.lines if "explored " in line)
    match = EXPLORED.search(status)
    assert match, status
    explored, requests, paid, budget = map(int, match.group(1, 2, 3, 4))
    start, outside, extra, cold_starts = int(match[5] or 0), int(match[6]), float(match[7]), int(match[8])
    assert requests >= 20 and cold_starts >= 1, status
    assert paid + outside == explored, status
    # The looks the budget paid for stay within its bound: its share of (streamed) requests, one look to start per
    # model at most.
    assert paid <= start + budget / 100 * requests and start <= len(DEMO_MODELS), status
    # Exploration's extra attempts stay within what pays for them: the race budget's share of requests, each cold
    # start's race (at most ``COLD_RACE`` attempts) and the budget's start; hedges have their own budget.
    hedges = BUILTIN_POLICIES["balanced"].hedge_budget
    assert extra <= RACE_BUDGET + hedges + (cold_starts * (COLD_RACE - 1) + start) / requests, status

    ports = demo.ports()
    assert demo.stop(signal.SIGTERM) == 0
    assert all(_refuses(port) for port in ports)
    assert not [line for line in demo.errors if "Traceback" in line], demo.errors


def test_demo_exits_by_itself_after_its_duration(demo_process: list[DemoProcess]) -> None:
    demo = DemoProcess("--traffic", "5", "--duration", "0.5")
    demo_process.append(demo)
    assert demo.finish(30) == 0
    assert any(READY in line for line in demo.lines)
    assert all(_refuses(port) for port in demo.ports())


def test_demo_refuses_a_taken_port_with_one_clear_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "gateway", "demo", "--port", str(port), "--duration", "5"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_demo_config_deploys_every_model_on_running_fakes() -> None:
    urls = {p.name: f"http://127.0.0.1:{9000 + i}/v1" for i, p in enumerate(DEMO_PROFILES)}
    config = demo_config(urls)
    assert config.stats.backend == "memory"
    for model, upstream, providers in DEMO_MODELS:
        declared = config.model(model)
        assert declared is not None
        assert [d.provider for d in declared.deployments] == list(providers)
        assert {d.model for d in declared.deployments} == {upstream}
        assert all(d.price_out > d.price_in > 0 for d in declared.deployments)


def test_the_written_config_reads_back_as_the_demos_own(tmp_path: Path) -> None:
    urls = {p.name: f"http://127.0.0.1:{9000 + i}/v1" for i, p in enumerate(DEMO_PROFILES)}
    path = tmp_path / "demo.toml"
    write_demo_config(str(path), demo_config_data(urls, "127.0.0.1", 8123))
    text = path.read_text()
    assert text.startswith("# Written by `gateway demo` at ")
    assert tomllib.loads(text) == demo_config_data(urls, "127.0.0.1", 8123)
    assert load_config(path).server.port == 8123


def _try_it(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if "try it" in line)
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        commands.append(line.strip())
    return commands


def test_the_banners_commands_run_as_printed_without_an_activated_venv(
    demo_process: list[DemoProcess], tmp_path: Path
) -> None:
    """As `make demo` runs it: the venv's own `gateway` script, from the checkout, with the venv not on PATH."""
    root = Path(__file__).resolve().parents[1]
    script = Path(sys.executable).parent / "gateway"
    assert script.is_file(), "the venv's gateway script (make install) is missing"
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env = {**os.environ, "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    config = tmp_path / "demo.toml"
    demo = DemoProcess(
        "--traffic", "0", "--degrade-after", "-1", "--duration", "120", "--write-config", str(config),
        command=[str(script)], cwd=root, env=env,
    )  # fmt: skip
    demo_process.append(demo)
    demo.wait_for(READY)
    commands = _try_it(demo.lines)
    banner = "\n".join(demo.lines)
    assert all(option in banner for option in ("--traffic RATE", "--port PORT", "--duration SECONDS"))
    assert f"config written to {config}" in banner
    activate = [c for c in commands if c.startswith("(or run `source ")]
    runnable = [c for c in commands if not c.startswith("(")]
    assert len(runnable) == 5 and len(activate) == 1, commands

    def run(command: str) -> subprocess.CompletedProcess[str]:
        if " bench " in command:  # as printed, then shortened: later options win in argparse
            command += " -n 1 --max-tokens 16 --timeout 30"
        return subprocess.run(["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=90)

    with ThreadPoolExecutor(len(runnable)) as pool:  # side by side: the benches wait on slow simulated providers
        results = list(pool.map(run, runnable))
    for command, done in zip(runnable, results, strict=True):
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command.startswith("curl"):
            assert done.stdout.rstrip().endswith("data: [DONE]")
        elif " bench " in command:
            assert "Tokens/s p50" in done.stdout and "fail" not in done.stdout.split("Tokens/s p50")[1].split("\n")[2]
        elif " stats " in command:
            assert done.stdout.startswith("window 60 s")
        else:
            assert done.stdout.strip()  # the model's answer
    line = activate[0].split("`")[1]  # source .../activate
    done = subprocess.run(["bash", "-c", f"{line} && gateway --version && python -c 'import gateway'"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("gateway "), done.stderr
    assert demo.stop() == 0
