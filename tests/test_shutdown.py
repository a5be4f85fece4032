"""Graceful shutdown of a real ``gateway serve`` process: SIGTERM with a paced stream in flight."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


class ServeProcess:
    """``python -m gateway serve`` in a subprocess; its stderr is collected line by line in a thread."""

    def __init__(self, config: Path) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = self._wait_for_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
                if found:
                    return int(found.group(1))
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("gateway serve did not start:\n" + "\n".join(self.lines))

    def accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def wait(self, timeout: float) -> int:
        """The exit status, once the process has ended and its log has been read to the end."""
        status = self.process.wait(timeout)
        self._reader.join(10)
        return status

    def log(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def _write_config(tmp_path: Path, fake: FakeServer, grace_s: float) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = 0\nshutdown_grace_s = {grace_s}\n'
        f'[[providers]]\nname = "p"\nbase_url = "{fake.base_url}"\n'
        '[[models]]\nname = "m"\n[[models.deployments]]\nprovider = "p"\nmodel = "up"\n'
    )
    return path


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for process in started:
        process.stop()


class StreamInThread:
    """Reads a streamed answer through the OpenAI SDK in a thread, keeping what arrived and how it ended."""

    def __init__(self, base_url: str) -> None:
        self.text = ""
        self.error: BaseException | None = None
        self.client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with self.client.chat.completions.create(model="m", messages=MESSAGES, stream=True) as stream:
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        self.text += chunk.choices[0].delta.content
        except (openai.APIError, httpx.HTTPError) as exc:
            self.error = exc
        finally:
            self.client.close()


def test_sigterm_lets_the_stream_in_flight_finish(fakes: Fakes, tmp_path: Path, serve: list[ServeProcess]) -> None:
    fake = fakes.start("p", FakeBehavior(tokens_per_s=20.0, output_tokens=30))  # ~1.5 s of paced answer
    gateway = ServeProcess(_write_config(tmp_path, fake, grace_s=30))
    serve.append(gateway)
    notice = [line for line in gateway.lines if "client auth OFF" in line]
    assert len(notice) == 1 and "only loopback clients are served on 127.0.0.1" in notice[0]

    reader = StreamInThread(gateway.base_url)
    wait_until(lambda: fake.app.state.open_streams == 1, 15, "the stream to reach the provider")
    gateway.process.send_signal(signal.SIGTERM)
    wait_until(lambda: not gateway.accepts(), 15, "the gateway to stop accepting connections")
    reader.thread.join(30)

    assert reader.error is None
    assert reader.text == "".join(answer_words(0, 30))
    assert gateway.wait(30) == 0
    log = gateway.log()
    assert "Waiting for connections to close" in log
    assert "Application shutdown complete" in log  # the lifespan ran: stats and limiter flushed, clients closed
    assert "Traceback" not in log


def test_the_grace_period_bounds_shutdown(fakes: Fakes, tmp_path: Path, serve: list[ServeProcess]) -> None:
    fake = fakes.start("p", FakeBehavior(tokens_per_s=5.0, output_tokens=300))  # a minute of answer
    gateway = ServeProcess(_write_config(tmp_path, fake, grace_s=0.5))
    serve.append(gateway)
    reader = StreamInThread(gateway.base_url)
    wait_until(lambda: fake.app.state.open_streams == 1, 15, "the stream to reach the provider")
    gateway.process.send_signal(signal.SIGTERM)
    # Well under the minute the answer would take: the grace period cut it.
    assert gateway.wait(20) == 0
    reader.thread.join(20)
    assert reader.text != "".join(answer_words(0, 300))
    wait_until(lambda: fake.app.state.open_streams == 0, 15, "the upstream stream to be dropped")
    log = gateway.log()
    assert "Application shutdown complete" in log
    # The stream the grace period cut is the stop working, not an application error.
    assert "shutdown grace of 0.5s exceeded" in log and "closing 1 open connection(s)" in log
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
