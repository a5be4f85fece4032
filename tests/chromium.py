"""Headless Chromium, run once per page load: ``--dump-dom`` for the DOM after scripts ran,
``--screenshot`` for a PNG; and ``devtools()`` for measuring a laid-out page at a chosen size.

Why: the dashboard is a page, and only a real browser says that it parses, lays out, runs its
refresh script under its Content-Security-Policy, and follows the ``?key=`` redirect with its
cookie. Each run gets a fresh profile directory, so no cookie or cache leaks between loads.
If Chromium is missing the test fails and says how to install it; it never skips.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

INSTALL_HINT = (
    "chromium is not installed or not on PATH; the dashboard's browser tests need it. "
    "Install Debian's package: `apt-get install -y chromium` (`make test` does this when it is missing)."
)

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        binary = shutil.which(name)
        if binary is not None:
            return binary
    raise AssertionError(INSTALL_HINT)


def _run(url: str, extra: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", *extra, url]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"chromium exited with {result.returncode}: {result.stderr[-2000:]}")
    return result


def dump_dom(url: str, *, wait_ms: int = 0, timeout: float = 60.0) -> str:
    """The page's DOM once loaded; ``wait_ms`` lets its timers run first (virtual time, not a sleep)."""
    extra = [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
    return _run(url, [*extra, "--dump-dom"], timeout).stdout


def screenshot(
    url: str, path: Path, *, width: int = 1280, height: int = 900, scale: float = 1.0, timeout: float = 60.0
) -> Path:
    """A PNG of the page laid out ``width`` × ``height`` CSS pixels wide, ``scale`` image pixels per CSS pixel."""
    size = [f"--window-size={width},{height}", f"--force-device-scale-factor={scale:g}"]
    _run(url, [*size, f"--screenshot={path}"], timeout)
    if not path.is_file() or path.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError(f"chromium wrote no PNG at {path}")
    return path


class DevTools:
    """One headless Chromium driven over the DevTools protocol: load a page at a given size, evaluate
    JavaScript in it, take a screenshot. For what ``--dump-dom`` cannot tell: where things landed.

    The page's own Content-Security-Policy does not apply to ``Runtime.evaluate`` (the protocol
    runs it, not the page), so the page is measured exactly as served.
    """

    def __init__(self, process: subprocess.Popen[str], socket: Any) -> None:
        self.process = process
        self.socket = socket
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []
        """Protocol events read while waiting for a reply, kept for ``wait_for_event``."""
        self._next = 0

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if self.session is not None:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic()))))

    def open(self, url: str, width: int, height: int) -> None:
        """A new tab of ``width`` × ``height`` CSS pixels showing ``url``, once its load event fired."""
        self.events = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
        )
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the open page (JSON-serialisable values only)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"the page's JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page (not only the viewport) as a PNG."""
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextlib.contextmanager
def devtools(timeout: float = 30.0) -> Iterator[DevTools]:
    """Headless Chromium with its DevTools endpoint on a free loopback port, stopped on exit."""
    from websockets.sync.client import connect

    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0"]
        process = subprocess.Popen(
            [*command, "about:blank"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        try:
            assert process.stderr is not None
            deadline = time.monotonic() + timeout
            address = None
            while address is None:
                line = process.stderr.readline()
                if not line and process.poll() is not None:
                    raise AssertionError(f"chromium exited with {process.returncode} before listening")
                found = re.search(r"DevTools listening on (ws://\S+)", line)
                address = found.group(1) if found else None
                if time.monotonic() > deadline:
                    raise AssertionError("chromium did not open its DevTools endpoint in time")
            # Its later log lines must not fill the pipe and stall it: drain them on the side.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            with connect(address, max_size=64 * 2**20, open_timeout=timeout) as socket:
                tools = DevTools(process, socket)
                yield tools
                with contextlib.suppress(Exception):  # the browser closes the socket as it goes
                    tools.session = None
                    tools.call("Browser.close", timeout=5)
        finally:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            if process.stderr is not None:
                process.stderr.close()
