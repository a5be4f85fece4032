"""aimock (``@copilotkit/aimock`` from npm), a third-party mock LLM server, on a free loopback port.

Why: the gateway must reach servers nobody on this team wrote, whatever API they speak. aimock answers
OpenAI's chat completions, Responses and embeddings and Anthropic's Messages API from one fixture pool
(each fixture matches a request and gives the answer or the error to send), in each API's own shapes,
streamed and whole; it keeps a journal of the requests it received (``requests``), which the tests hold
the gateway's retries and translations against. It starts in well under a second and uses no model.

``make test`` installs it in ``.cache/aimock`` (``tests/install-deps``, ``INSTALL``); ``GATEWAY_AIMOCK`` may name
another ``node_modules/.bin`` that holds ``llmock``. A missing binary fails the test with the command that
installs it: never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

AIMOCK_ENV = "GATEWAY_AIMOCK"
VERSION = "1.43.0"
BIN = Path(__file__).resolve().parents[1] / ".cache/aimock/node_modules/.bin"
INSTALL = f"npm install --prefix .cache/aimock @copilotkit/aimock@{VERSION} (as `make test` does)"


def find_aimock() -> Path:
    """The ``llmock`` binary (aimock's fixture-file server), or a test failure saying how to install it."""
    place = Path(os.environ.get(AIMOCK_ENV) or BIN)
    binary = place / "llmock"
    if not binary.exists():
        pytest.fail(f"aimock is not installed (no {binary}): {INSTALL}")
    return binary


def _discard(stream: IO[str]) -> None:
    for _ in stream:
        pass


class AimockServer:
    """One aimock process serving ``fixtures`` (aimock's JSON fixture entries, first match wins).

    ``base_url`` is ``http://127.0.0.1:<port>/v1``, ``url`` the same without ``/v1`` (for the Anthropic SDK).
    """

    def __init__(self, fixtures: list[dict[str, Any]], name: str = "aimock") -> None:
        self.fixtures = fixtures
        self.name = name
        self.url = ""
        self.base_url = ""
        self.process: subprocess.Popen[str] | None = None
        self._drain: threading.Thread | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="aimock-")

    def start(self, timeout: float = 20.0) -> AimockServer:
        try:
            binary = find_aimock()
        except BaseException:
            self._dir.cleanup()  # else its finaliser warns inside whichever test runs next
            raise
        path = Path(self._dir.name) / "fixtures.json"
        path.write_text(json.dumps({"fixtures": self.fixtures}))
        self.process = subprocess.Popen(
            [str(binary), "--port", "0", "--fixtures", str(path), "--log-level", "info"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if "listening on " in line:
                self.url = line.rsplit("listening on ", 1)[1].strip()
                self.base_url = self.url + "/v1"
                # Its log goes on (a line per unmatched request, warnings): read and dropped, so that a full
                # pipe never stalls the server.
                self._drain = threading.Thread(target=_discard, args=(self.process.stdout,), daemon=True)
                self._drain.start()
                return self
            if not line and self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"aimock exited with {self.process.returncode} before serving")
        self.stop()
        raise RuntimeError(f"aimock did not start within {timeout:g}s")

    def __enter__(self) -> AimockServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        """The requests aimock received (its journal), oldest first; only those to ``path`` when given."""
        entries: list[dict[str, Any]] = httpx.get(self.url + "/__aimock/journal", timeout=5).json()
        return [e for e in entries if path is None or e["path"] == path]

    def forget(self) -> None:
        """Empty the journal (between tests sharing one server)."""
        httpx.post(self.url + "/__aimock/reset/journal", timeout=5).raise_for_status()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            if self._drain is not None:
                self._drain.join(10)  # the pipe's end came with the process's: the reader returns
            if self.process.stdout is not None:
                self.process.stdout.close()
        self._dir.cleanup()
